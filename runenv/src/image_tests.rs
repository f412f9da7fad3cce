//! Tests of the image plan and the environment rules (`image`).

use super::*;

fn p(s: &str) -> PathBuf {
    PathBuf::from(s)
}

fn user() -> User {
    User {
        name: "alice".into(),
        uid: 4242,
        gid: 4243,
        group: "alicegrp".into(),
        home: p("/home/alice"),
        shell: p("/bin/bash"),
    }
}

fn facts() -> ImageFacts {
    ImageFacts {
        image: p("/run/teesfs/jobs/7"),
        etc: Some(Kind::Dir { mode: 0o755 }),
        passwd: Some("root:x:0:0:root:/root:/bin/sh\nbin:x:2:2::/bin:/bin/false".into()),
        group: Some("root:x:0:\nalicegrp:x:4243:\n".into()),
        hosts: Some(b"127.0.0.1 localhost\n".to_vec()),
        resolv: None,
        user: user(),
        home: Some(p("/home/alice")),
        binds: vec![
            (p("/scratch"), Some(Kind::Dir { mode: 0o755 })),
            (p("/lustre"), None),
            (p("/etc/krb5.conf"), Some(Kind::File)),
            (p("/scratch/../etc"), Some(Kind::Dir { mode: 0o755 })),
            (p("/dev/null"), Some(Kind::Other)),
        ],
    }
}

fn bind(source: &str, target: &str, recursive: bool) -> Op {
    Op::Bind {
        source: p(source),
        target: p(target),
        recursive,
    }
}

#[test]
fn the_image_is_the_root_with_the_hosts_places_bound_on_a_skeleton() {
    let plan = plan(Path::new("/st"), &facts(), Privilege::User);
    assert_eq!(plan.prepare[0], Op::Tmpfs { target: p("/st") });
    assert_eq!(
        plan.ops,
        [
            Op::Overlay {
                target: p("/st/root"),
                lowers: vec![p("/st/skel"), p("/run/teesfs/jobs/7")],
                upper: p("/st/upper"),
                work: p("/st/work"),
                userxattr: true,
            },
            bind("/dev", "/st/root/dev", true),
            bind("/sys", "/st/root/sys", true),
            bind("/tmp", "/st/root/tmp", true),
            bind("/scratch", "/st/root/scratch", true),
            bind("/home/alice", "/st/root/home/alice", true),
            bind("/etc/krb5.conf", "/st/root/etc/krb5.conf", false),
        ],
        "the host's /proc is not bound: the init mounts a new one"
    );
    let skipped: Vec<&Path> = plan.skipped.iter().map(|(p, _)| p.as_path()).collect();
    assert_eq!(
        skipped,
        [p("/lustre"), p("/scratch/../etc"), p("/dev/null")],
        "a path missing on the node, one that is not plain, and a device are left out"
    );
    for d in ["proc", "dev", "sys", "tmp", "scratch", "home/alice", "etc"] {
        assert!(
            plan.skeleton.contains(&Skel::Dir(p("/st/skel").join(d))),
            "{d} has no mount point in the skeleton: {:?}",
            plan.skeleton
        );
    }
    assert!(
        plan.skeleton
            .contains(&Skel::File(p("/st/skel/etc/krb5.conf"), Vec::new()))
    );
}

#[test]
fn a_slurm_task_gets_the_hosts_proc_and_trusted_xattrs() {
    let plan = plan(Path::new("/st"), &facts(), Privilege::Root);
    assert!(plan.ops.contains(&bind("/proc", "/st/root/proc", true)));
    assert!(matches!(
        plan.ops[0],
        Op::Overlay {
            userxattr: false,
            ..
        }
    ));
}

#[test]
fn passwd_and_group_gain_the_user_only_when_the_image_lacks_them() {
    let plan = plan(Path::new("/st"), &facts(), Privilege::User);
    let file = |name: &str| -> String {
        plan.skeleton
            .iter()
            .find_map(|s| match s {
                Skel::File(path, c) if path.ends_with(name) => {
                    Some(String::from_utf8(c.clone()).expect("utf8"))
                }
                _ => None,
            })
            .unwrap_or_else(|| panic!("no {name}"))
    };
    assert_eq!(
        file("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nbin:x:2:2::/bin:/bin/false\n\
         alice:x:4242:4243:alice:/home/alice:/bin/bash\n"
    );
    assert_eq!(
        file("etc/group"),
        "root:x:0:\nalicegrp:x:4243:\n",
        "the image has the group already"
    );
    assert_eq!(file("etc/hosts"), "127.0.0.1 localhost\n");
    assert!(
        !plan
            .skeleton
            .iter()
            .any(|s| matches!(s, Skel::File(p, _) if p.ends_with("resolv.conf"))),
        "the host has no resolv.conf to give"
    );
    assert_eq!(with_entry("", 5, "x:x:5:"), "x:x:5:\n");
    assert_eq!(with_entry("a:x:5:\n", 5, "b:x:5:"), "a:x:5:\n");
}

#[test]
fn an_etc_that_is_not_a_directory_is_left_alone() {
    let mut f = facts();
    f.etc = Some(Kind::Symlink { to: p("/ro/etc") });
    let plan = plan(Path::new("/st"), &f, Privilege::User);
    assert!(
        !plan
            .skeleton
            .iter()
            .any(|s| matches!(s, Skel::File(p, _) | Skel::Dir(p) if p.ends_with("etc/passwd"))),
    );
    assert!(plan.skipped.iter().any(|(p, _)| p == Path::new("/etc")));
}

fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
    pairs.iter().map(|(k, v)| (k.into(), v.into())).collect()
}

#[test]
fn the_images_env_wins_but_the_users_home_and_terminal_stay() {
    let image = [
        "PATH=/opt/conda/bin:/usr/bin",
        "LANG=C.UTF-8",
        "CUDA_VERSION=12.4",
        "HOME=/root",
        "TERM=xterm",
        "not an assignment",
        "=empty name",
        "EMPTY=",
    ]
    .map(String::from);
    let user = env(&[
        ("PATH", "/usr/bin:/opt/slurm/bin"),
        ("HOME", "/home/alice"),
        ("LANG", "en_US.UTF-8"),
        ("LC_ALL", "fr_FR.UTF-8"),
        ("CUDA_VERSION", "11.8"),
        ("SLURM_JOB_ID", "7"),
    ]);
    let merged = apply_env(user, &env_ops(&image));
    assert_eq!(
        merged,
        env(&[
            ("PATH", "/opt/conda/bin:/usr/bin"),
            ("HOME", "/home/alice"),
            ("CUDA_VERSION", "12.4"),
            ("SLURM_JOB_ID", "7"),
            ("LANG", "C.UTF-8"),
            ("TERM", "xterm"),
            ("EMPTY", ""),
        ]),
        "PATH and CUDA_VERSION from the image, the host's locale dropped, the image's LANG \
         applied, HOME kept, TERM set as the user had none"
    );
}

#[test]
fn an_image_without_path_gets_the_usual_one() {
    let merged = apply_env(env(&[("PATH", "/host/only")]), &env_ops(&[]));
    assert_eq!(merged, env(&[("PATH", DEFAULT_PATH)]));
}

#[test]
fn without_a_command_the_entrypoint_and_cmd_run() {
    let cfg = ImageConfig {
        entrypoint: vec!["/entry.sh".into()],
        cmd: vec!["serve".into(), "--port=1".into()],
        ..ImageConfig::default()
    };
    let given: Vec<OsString> = vec!["python3".into()];
    assert_eq!(command(&given, &cfg), Some(given.clone()));
    assert_eq!(
        command(&[], &cfg),
        Some(vec!["/entry.sh".into(), "serve".into(), "--port=1".into()])
    );
    assert_eq!(command(&[], &ImageConfig::default()), None);
}
