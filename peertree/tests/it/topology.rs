//! `topology.toml` parsing: patterns, explicit groups, levels, and errors that name lines.

use peertree::Error;
use peertree::topology::{GroupId, Topology};

#[test]
fn patterns_make_groups_of_eight_with_the_first_as_proxy() {
    let t = Topology::from_toml(
        r#"
[[pattern]]
nodes = "cn[00001-00020]"
group_size = 8
"#,
    )
    .expect("valid");
    assert_eq!(t.len(), 20);
    assert_eq!(t.groups().len(), 3);
    assert_eq!(t.host(t.group(GroupId(1)).proxy), "cn00009");
    assert_eq!(t.group(GroupId(2)).members.len(), 4);
    let c = t.lookup("cn00010").expect("known");
    assert_eq!(t.group_of(c), GroupId(1));
    assert!(!t.is_proxy(c));
}

#[test]
fn explicit_groups_patterns_and_levels_keep_file_order() {
    let t = Topology::from_toml(
        r#"
[[group]]
proxy = "io2"
members = "io[1-3]"

[[pattern]]
nodes = "cn[1-28]"
group_size = 7
proxy = "last"

[[level]]
name = "supernode"
size = 14

[[level]]
name = "cabinet"
size = 28
"#,
    )
    .expect("valid");
    assert_eq!(t.host(t.group(GroupId(0)).proxy), "io2");
    assert_eq!(t.host(t.group(GroupId(1)).proxy), "cn7");
    assert_eq!(t.levels().len(), 2);
    // io group's proxy is node 1, first cn proxy (cn7) is node 9: same super node.
    assert_eq!(t.levels_apart(GroupId(0), GroupId(1)), 0);
    // cn21's group: proxy cn21 is node 23, super node 1, cabinet 0.
    assert_eq!(t.levels_apart(GroupId(0), GroupId(3)), 1);
}

fn line_of_error(src: &str) -> (usize, String) {
    match Topology::from_toml(src) {
        Err(Error::Topology { line, message } | Error::TopologySyntax { line, message }) => {
            (line, message)
        }
        other => panic!("expected a topology error, got {other:?}"),
    }
}

#[test]
fn errors_name_the_offending_line() {
    let (line, msg) = line_of_error("[[pattern]]\nnodes = \"cn[1-4]\"\ngroup_size = 0\n");
    assert_eq!(line, 3, "{msg}");

    let (line, msg) =
        line_of_error("[[group]]\nmembers = \"a[1-2]\"\n\n[[group]]\nmembers = \"a[2-3]\"\n");
    assert_eq!(line, 4, "{msg}");
    assert!(msg.contains("a2"), "{msg}");

    let (line, msg) = line_of_error("[[group]]\nproxy = \"b\"\nmembers = \"a[1-2]\"\n");
    assert_eq!(line, 1, "{msg}");
    assert!(msg.contains("proxy"), "{msg}");

    let (line, msg) = line_of_error("\n[[pattern]]\nnodes = \"cn[1-4\"\ngroup_size = 2\n");
    assert_eq!(line, 3, "{msg}");
    assert!(msg.contains("never closed"), "{msg}");

    let (line, msg) = line_of_error("[[pattern]]\nnodes = \"cn[1-4]\"\ngroupsize = 2\n");
    assert_eq!(line, 3, "{msg}");

    let (line, msg) =
        line_of_error("[[pattern]]\nnodes = \"cn[1-4]\"\ngroup_size = 2\nproxy = \"middle\"\n");
    assert_eq!(line, 4, "{msg}");

    let (line, msg) = line_of_error(
        "[[pattern]]\nnodes = \"cn[1-4]\"\ngroup_size = 2\n[[level]]\nname = \"a\"\nsize = 8\n[[level]]\nname = \"b\"\nsize = 4\n",
    );
    assert_eq!(line, 9, "{msg}");

    let (line, _) = line_of_error("# nothing\n");
    assert_eq!(line, 1);

    let (line, msg) = line_of_error(
        "[[pattern]]\nnodes = \"cn[1-4]\"\ngroup_size = 2\n\n[links]\nnode = \"fast\"\nport = \"1gbit\"\nuplink = \"1gbit\"\nlogin = \"1gbit\"\n",
    );
    assert_eq!(line, 5, "{msg}");
    assert!(msg.contains("bad rate `fast`"), "{msg}");
    let (line, msg) = line_of_error(
        "[[pattern]]\nnodes = \"cn[1-4]\"\ngroup_size = 2\n[links]\nnode = \"1gbit\"\n",
    );
    assert_eq!(line, 4, "{msg}");
    assert!(msg.contains("port"), "{msg}");
}

#[test]
fn link_rates_come_from_the_links_table() {
    let t = Topology::from_toml(
        "[[pattern]]\nnodes = \"cn[1-16]\"\ngroup_size = 8\n[links]\nnode = \"100mbit\"\nport = \"400mbit\"\nuplink = \"1gbit\"\nlogin = \"400mbit\"\n",
    )
    .expect("valid");
    let l = t.links().expect("rates given");
    assert_eq!(
        (l.port_streams(), l.uplink_streams(), l.login_streams()),
        (4, 10, 4)
    );
    let bare =
        Topology::from_toml("[[pattern]]\nnodes = \"cn[1-16]\"\ngroup_size = 8\n").expect("valid");
    assert!(bare.links().is_none());
}
