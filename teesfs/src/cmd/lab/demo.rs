//! `teesfs lab demo`: the README's main job. Builds the reference lab, publishes a Python
//! application with real PyPI dependencies (built by `lab/scripts/demo-layer.sh`), pushes
//! it urgent-first, starts the application on every node as soon as its mount appears,
//! and reports when the urgent set, the application and the whole layer reached every node.

use std::path::PathBuf;

use lab::launch::{Launch, Method};

use super::ShapeArgs;

/// Arguments of `teesfs lab demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    #[command(flatten)]
    shape: ShapeArgs,
    /// Where the application layer is built (pip install --target) and cached.
    #[arg(long, value_name = "DIR", default_value = "/var/tmp/teesfs-lab-demo")]
    layer_dir: PathBuf,
    /// The HTML report to write (an .svg is written beside it); outside the working tree,
    /// so a run from a checkout leaves nothing in it.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/var/tmp/teesfs-lab-demo.html"
    )]
    report: PathBuf,
    /// Python interpreter (must match the one the layer was built with).
    #[arg(long, default_value = "python3")]
    python: String,
}

/// Runs the demo: [`super::launch::launch`] on the Python layer it builds, with the
/// teesfs methods (no Slurm needed).
pub fn run(a: DemoArgs) -> anyhow::Result<()> {
    lab::require_root()?;
    let built = lab::demo::build_python_layer(&a.layer_dir, &a.python)?;
    let mut lab = a.shape.up()?;
    let result = (|| {
        let l = Launch {
            layer: built.layer.clone(),
            index: super::launch::publish(&lab, &built.layer)?,
            urgent: built.urgent.clone(),
            app: lab::demo::python_app(&built.python),
            probe: "app/main.py".into(),
            bulk_after: std::time::Duration::from_secs(30),
            bulk_quiet: std::time::Duration::from_secs(2),
        };
        let methods = [
            Method::UrgentFirst,
            Method::Polite,
            Method::CopyFirst,
            Method::DemandOnly,
            Method::SharedStorage,
            Method::Learned,
        ];
        super::launch::launch(&mut lab, &l, &methods, &a.report, "teesfs lab demo")
    })();
    lab.down()?;
    result
}
