//! `teesfs inspect` of an image (issue 34): an index published with `teesfs publish --image`
//! shows the image's config (the command a task runs without one, its working directory,
//! user, `Env` and `Labels`) in the text output and as `image` in `--format json`; a layer
//! published from a directory shows none.

use std::path::Path;

use teesfs_node::output::{ImageDoc, IndexDoc};

use crate::image_publish::can_build_images;
use crate::run_image::publish_oci;
use crate::util::Workspace;

/// `teesfs inspect --index ID` (text, or `json`): stdout, which must be a success.
fn inspect(ws: &Workspace, id: &str, format: &str) -> String {
    let s = |p: &Path| p.to_str().expect("utf8").to_string();
    let (store, pubkey) = (s(&ws.store()), s(&ws.pubkey()));
    let args = [
        "inspect", "--store", &store, "--index", id, "--trust", &pubkey, "--format", format,
    ];
    let out = ws.teesfs(&args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "inspect: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn doc(json: &str) -> IndexDoc {
    serde_json::from_str(json).unwrap_or_else(|e| panic!("not an IndexDoc: {e}\n{json}"))
}

/// One file, enough for an image.
fn tiny_root(ws: &Workspace) -> std::path::PathBuf {
    let root = ws.path().join("root");
    std::fs::create_dir_all(root.join("wd")).expect("root");
    std::fs::write(root.join("hello"), "hello\n").expect("file");
    root
}

#[test]
fn inspect_of_an_image_shows_its_config_in_text_and_json() {
    if !can_build_images() {
        return;
    }
    let ws = Workspace::new();
    let id = publish_oci(
        &ws,
        &tiny_root(&ws),
        "--config.entrypoint /bin/sh --config.cmd=-c --config.cmd='echo $IMG; pwd' \
         --config.env IMG=from-the-index --config.env PATH=/bin --config.workingdir /wd \
         --config.user 1000:100 --config.label org.example.title=demo \
         --config.label org.example.version=1.2",
        &[],
    );
    let text = inspect(&ws, &id[..8], "text");
    let block: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("image config"))
        .take_while(|l| l.starts_with("image config") || l.starts_with("  "))
        .collect();
    assert_eq!(
        block,
        [
            "image config (`teesfs run --image`, `--teesfs-image`):",
            "  command:     /bin/sh -c 'echo $IMG; pwd'  (Entrypoint + Cmd: what runs without `-- CMD`)",
            "  entrypoint:  /bin/sh",
            "  cmd:         -c 'echo $IMG; pwd'",
            "  workdir:     /wd  (when the task's directory is not in the image)",
            "  user:        1000:100  (not used: tasks run as the user who starts them)",
            "  env:         IMG=from-the-index",
            "               PATH=/bin",
            "  labels:      org.example.title=demo",
            "               org.example.version=1.2",
        ],
        "the image block of:\n{text}"
    );
    assert!(
        text.lines().any(|l| l.contains(" /hello")),
        "the entries still follow:\n{text}"
    );
    let json = inspect(&ws, &id, "json");
    let d = doc(&json);
    assert_eq!(d.id, id);
    assert!(d.entries.iter().any(|e| e.path == "hello"), "{json}");
    let labels = [
        ("org.example.title", "demo"),
        ("org.example.version", "1.2"),
    ];
    assert_eq!(
        d.image,
        Some(ImageDoc {
            env: vec!["IMG=from-the-index".into(), "PATH=/bin".into()],
            entrypoint: vec!["/bin/sh".into()],
            cmd: vec!["-c".into(), "echo $IMG; pwd".into()],
            working_dir: Some("/wd".into()),
            user: Some("1000:100".into()),
            labels: labels.map(|(k, v)| (k.into(), v.into())).into(),
        }),
        "{json}"
    );
}

#[test]
fn inspect_of_a_plain_layer_shows_no_image_config() {
    let ws = Workspace::new();
    let id = ws.publish(&tiny_root(&ws));
    let text = inspect(&ws, &id[..8], "text");
    assert!(
        !text.contains("image config") && text.lines().any(|l| l.contains(" /hello")),
        "{text}"
    );
    let json = inspect(&ws, &id, "json");
    let raw: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert!(raw["image"].is_null(), "{json}");
    for field in [
        "version",
        "id",
        "publisher",
        "expires",
        "file_bytes",
        "chunks",
    ] {
        assert!(raw.get(field).is_some(), "{field} kept: {json}");
    }
    assert_eq!(doc(&json).image, None);
}
