//! Dependency analysis against real programs: the ELF closure computed over a layer must
//! name the same files inside the layer, in the same order, as the real dynamic loader
//! (`LD_TRACE_LOADED_OBJECTS=1`, what `ldd` does) resolves when the program runs from the
//! layer; `#!` chains through `env`; errors name the bad part.

use std::ffi::OsStr;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use seeder::deps::{Analysis, Env, Platform, View};

/// What the real loader maps for `prog`: (name, resolved path or None when not found),
/// in link-map order.
fn ld_trace(prog: &Path, ld_library_path: Option<&Path>) -> Vec<(String, Option<PathBuf>)> {
    let mut cmd = Command::new(prog);
    cmd.env_clear().env("LD_TRACE_LOADED_OBJECTS", "1");
    if let Some(p) = ld_library_path {
        cmd.env("LD_LIBRARY_PATH", p);
    }
    let out = cmd.output().expect("run the traced program");
    assert!(out.status.success() || !out.stdout.is_empty(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let (name, rest) = l.split_once(" => ")?;
            let path = rest.split(" (").next().expect("path").trim();
            Some((
                name.to_string(),
                (path != "not found" && !path.is_empty()).then(|| PathBuf::from(path)),
            ))
        })
        .collect()
}

/// The layer files among the loader's results, canonical and relative to the layer, in order.
fn layer_files(trace: &[(String, Option<PathBuf>)], layer: &Path) -> Vec<PathBuf> {
    let layer = std::fs::canonicalize(layer).expect("layer");
    trace
        .iter()
        .filter_map(|(_, p)| p.as_ref())
        .filter_map(|p| {
            std::fs::canonicalize(p)
                .ok()?
                .strip_prefix(&layer)
                .ok()
                .map(Path::to_path_buf)
        })
        .collect()
}

fn analysis(layer: &Path, ld_library_path: Option<&str>, path: &str) -> Analysis {
    let env = Env {
        path: path.into(),
        ld_library_path: ld_library_path.map(Into::into),
        cwd: "/".into(),
    };
    Analysis::new(View::new(layer, "/"), env, Platform::host())
}

/// The layer libraries in our load order (the program itself and the interpreter, which
/// the loader's trace does not list as `name => path`, left out).
fn our_layer_libs(loaded: &[seeder::deps::Loaded]) -> Vec<PathBuf> {
    loaded
        .iter()
        .skip(1)
        .filter(|l| l.in_layer)
        .map(|l| l.path.strip_prefix("/").expect("absolute").to_path_buf())
        .collect()
}

#[test]
fn closure_of_curl_matches_the_dynamic_loader() {
    let tmp = tempfile::tempdir().expect("tmp");
    let layer = tmp.path().join("layer");
    let (bin, lib) = (layer.join("opt/app/bin"), layer.join("opt/app/lib"));
    std::fs::create_dir_all(&bin).expect("mkdir");
    std::fs::create_dir_all(&lib).expect("mkdir");
    let curl = std::fs::canonicalize("/usr/bin/curl").expect("curl is installed");
    std::fs::copy(&curl, bin.join("curl")).expect("copy curl");
    // Every other library the host loads for curl goes into the layer (the rest stays
    // on the host), the first one behind a symlink as distributions install them.
    let host = ld_trace(&curl, None);
    assert!(host.len() > 5, "curl needs libraries: {host:?}");
    let mut copied = Vec::new();
    for (i, (name, path)) in host.iter().enumerate() {
        let path = path
            .as_ref()
            .expect("the host resolves all of curl's libraries");
        if i % 2 == 1 || name.starts_with("libc.so") || name.starts_with("ld-linux") {
            continue;
        }
        if copied.is_empty() {
            std::fs::copy(path, lib.join(format!("{name}.0.0"))).expect("copy");
            symlink(format!("{name}.0.0"), lib.join(name)).expect("symlink");
        } else {
            std::fs::copy(path, lib.join(name)).expect("copy");
        }
        copied.push(name.clone());
    }
    assert!(copied.len() >= 3, "{copied:?}");

    let real = ld_trace(&bin.join("curl"), Some(&lib));
    let theirs = layer_files(&real, &layer);
    let mut a = analysis(&layer, Some("/opt/app/lib"), "/usr/bin:/bin");
    let loaded = a
        .add_command(OsStr::new("/opt/app/bin/curl"))
        .expect("analysis");
    assert_eq!(
        our_layer_libs(&loaded),
        theirs,
        "load order of the layer's libraries"
    );
    assert_eq!(theirs.len(), copied.len(), "every copy is used: {real:?}");
    assert!(a.missing().is_empty(), "{:?}", a.missing());
    // Every library the loader resolved outside the layer was found by us too.
    let ours: Vec<PathBuf> = loaded
        .iter()
        .map(|l| std::fs::canonicalize(&l.path).unwrap_or_else(|_| l.path.clone()))
        .collect();
    for (name, p) in &real {
        let p = std::fs::canonicalize(p.as_ref().expect("found")).expect("exists");
        if !p.starts_with(tmp.path()) {
            assert!(
                ours.contains(&p),
                "{name} at {} missing from {ours:?}",
                p.display()
            );
        }
    }

    // The urgent list: the program, then each layer library in load order, the symlink
    // right before its target; nothing from the host.
    let first = PathBuf::from("opt/app/lib").join(&copied[0]);
    let mut want = vec![PathBuf::from("opt/app/bin/curl")];
    for f in &theirs {
        if f.file_name() == Some(OsStr::new(&format!("{}.0.0", copied[0]))) {
            want.push(first.clone());
        }
        want.push(f.clone());
    }
    assert_eq!(a.urgent(), want);
}

fn gcc(args: &[&str], cwd: &Path) {
    let out = Command::new("gcc")
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("gcc is installed");
    assert!(out.status.success(), "gcc {args:?}: {out:?}");
}

/// `prog -> libtwo -> libone`, with `$ORIGIN/../lib` on the program only: as `DT_RPATH`
/// it is inherited by libtwo's search for libone, as `DT_RUNPATH` it is not.
#[test]
fn rpath_is_inherited_and_runpath_is_not_like_the_loader() {
    let tmp = tempfile::tempdir().expect("tmp");
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(src.join("one.c"), "int one(void) { return 1; }\n").expect("write");
    std::fs::write(
        src.join("two.c"),
        "int one(void);\nint two(void) { return one() + 1; }\n",
    )
    .expect("write");
    std::fs::write(
        src.join("main.c"),
        "int two(void);\nint main(void) { return two() - 2; }\n",
    )
    .expect("write");
    gcc(
        &[
            "-shared",
            "-fPIC",
            "-o",
            "libone.so",
            "one.c",
            "-Wl,-soname,libone.so",
        ],
        &src,
    );
    gcc(
        &[
            "-shared",
            "-fPIC",
            "-o",
            "libtwo.so",
            "two.c",
            "-L.",
            "-lone",
            "-Wl,-soname,libtwo.so",
        ],
        &src,
    );
    for (flavour, dtags, inherited) in [
        ("runpath", "-Wl,--enable-new-dtags", false),
        ("rpath", "-Wl,--disable-new-dtags", true),
    ] {
        let layer = tmp.path().join(flavour);
        let (bin, lib) = (layer.join("opt/t/bin"), layer.join("opt/t/lib"));
        std::fs::create_dir_all(&bin).expect("mkdir");
        std::fs::create_dir_all(&lib).expect("mkdir");
        for l in ["libone.so", "libtwo.so"] {
            std::fs::copy(src.join(l), lib.join(l)).expect("copy");
        }
        let prog = bin.join("prog");
        gcc(
            &[
                "-o",
                prog.to_str().expect("utf8"),
                "main.c",
                "-L.",
                "-ltwo",
                "-Wl,-rpath-link,.",
                "-Wl,-rpath,$ORIGIN/../lib",
                dtags,
            ],
            &src,
        );
        let real = ld_trace(&prog, None);
        let one_found = real.iter().any(|(n, p)| n == "libone.so" && p.is_some());
        assert_eq!(one_found, inherited, "{flavour}: the loader says {real:?}");

        let mut a = analysis(&layer, None, "/usr/bin");
        let loaded = a
            .add_command(OsStr::new("/opt/t/bin/prog"))
            .expect("analysis");
        assert_eq!(
            our_layer_libs(&loaded),
            layer_files(&real, &layer),
            "{flavour}"
        );
        let missing: Vec<&str> = a.missing().iter().map(|m| m.name.as_str()).collect();
        if inherited {
            assert!(missing.is_empty(), "{flavour}: {missing:?}");
        } else {
            assert_eq!(missing, ["libone.so"], "{flavour}");
            assert_eq!(a.missing()[0].needed_by, Path::new("/opt/t/lib/libtwo.so"));
        }
    }
}

#[test]
fn shebang_chains_through_env_to_a_python_in_the_layer() {
    let tmp = tempfile::tempdir().expect("tmp");
    let layer = tmp.path().join("layer");
    let py = layer.join("opt/py/bin");
    std::fs::create_dir_all(&py).expect("mkdir");
    let python = std::fs::canonicalize("/usr/bin/python3").expect("python3 is installed");
    std::fs::copy(&python, py.join("python3.11")).expect("copy");
    symlink("python3.11", py.join("python3")).expect("symlink");
    let app = layer.join("opt/app");
    std::fs::create_dir_all(&app).expect("mkdir");
    std::fs::write(
        app.join("launcher"),
        "#!/usr/bin/env -S python3 -u\nprint('hi')\n",
    )
    .expect("write");
    std::fs::write(app.join("start"), "#!/opt/app/launcher --fast\n").expect("write");
    let mut a = analysis(&layer, None, "/opt/py/bin:/usr/bin:/bin");
    let loaded = a
        .add_command(OsStr::new("/opt/app/start"))
        .expect("analysis");
    assert_eq!(
        a.urgent(),
        [
            "opt/app/start",
            "opt/app/launcher",
            "opt/py/bin/python3",
            "opt/py/bin/python3.11"
        ]
        .map(PathBuf::from)
    );
    assert_eq!(loaded[0].path, Path::new("/opt/py/bin/python3.11"));
    assert!(loaded.len() > 2 && loaded[1..].iter().all(|l| !l.in_layer));
    // The same python found through PATH by name.
    let mut b = analysis(&layer, None, "/opt/py/bin:/usr/bin");
    b.add_command(OsStr::new("python3")).expect("by name");
    assert_eq!(b.urgent()[0], Path::new("opt/py/bin/python3"));
}

#[test]
fn bad_commands_name_the_bad_part() {
    let tmp = tempfile::tempdir().expect("tmp");
    let layer = tmp.path().join("layer");
    std::fs::create_dir_all(layer.join("bin")).expect("mkdir");
    let ls = std::fs::read(std::fs::canonicalize("/bin/ls").expect("ls")).expect("read ls");
    std::fs::write(layer.join("bin/broken"), &ls[..200]).expect("write");
    std::fs::write(layer.join("bin/orphan"), "#!/no/such/interp\n").expect("write");
    std::fs::write(
        layer.join("bin/envless"),
        "#!/usr/bin/env no-such-tool-xyz\n",
    )
    .expect("write");
    std::fs::write(layer.join("bin/text"), "just text\n").expect("write");
    for (cmd, says) in [
        ("no-such-command-xyz", "no-such-command-xyz"),
        ("/bin/broken", "/bin/broken: malformed ELF"),
        ("/bin/orphan", "/no/such/interp"),
        ("/bin/envless", "no-such-tool-xyz"),
        (
            "/bin/text",
            "/bin/text: neither an ELF file nor a #! script",
        ),
    ] {
        let mut a = analysis(&layer, None, "/usr/bin:/bin");
        let err = a.add_command(OsStr::new(cmd)).expect_err(cmd).to_string();
        assert!(err.contains(says), "{cmd}: {err}");
    }
}
