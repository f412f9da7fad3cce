//! Hostlist parsing and formatting against Slurm's documented behaviour.

use peertree::Error;
use peertree::hostlist::{compress, expand};
use proptest::prelude::*;

#[test]
fn tricky_cases_expand_like_slurm() {
    let cases: &[(&str, &str)] = &[
        (
            "cn[0001-0003,0005],login1",
            "cn0001 cn0002 cn0003 cn0005 login1",
        ),
        ("n[8-11]", "n8 n9 n10 n11"),
        ("n[08-11]", "n08 n09 n10 n11"),
        ("n[098-101]", "n098 n099 n100 n101"),
        ("n[1-3]-ib", "n1-ib n2-ib n3-ib"),
        ("r[1-2]n[01-02]", "r1n01 r1n02 r2n01 r2n02"),
        ("a[1-2]b[3-4]c", "a1b3c a1b4c a2b3c a2b4c"),
        ("n[3,1,2]", "n3 n1 n2"),
        ("n1,n1,n[1-2]", "n1 n2"),
        ("n[1-3],n2", "n1 n2 n3"),
        ("a,,b,", "a b"),
        ("a b\tc", "a b c"),
        ("login", "login"),
        ("n[5]", "n5"),
        ("n[0-0]", "n0"),
        ("[1-2]", "1 2"),
        ("n1[0-2]", "n10 n11 n12"),
        ("", ""),
    ];
    for (expr, want) in cases {
        let want: Vec<&str> = want.split_whitespace().collect();
        assert_eq!(expand(expr).expect(expr), want, "expanding {expr:?}");
    }
}

#[test]
fn tricky_cases_compress_like_slurm() {
    let cases: &[(&str, &str)] = &[
        (
            "cn0001 cn0002 cn0003 cn0005 login1",
            "cn[0001-0003,0005],login1",
        ),
        ("n8 n9 n10 n11", "n[8-11]"),
        ("n098 n099 n100 n101", "n[098-101]"),
        ("n9 n10 n010", "n[9-10,010]"),
        ("n3 n1 n2", "n[3,1-2]"),
        ("n1 m1 n2", "n1,m1,n2"),
        ("r1n01 r1n02 r2n01", "r1n[01-02],r2n01"),
        ("login", "login"),
        ("n5", "n5"),
        ("a b", "a,b"),
        ("n1-ib n2-ib", "n1-ib,n2-ib"),
    ];
    for (hosts, want) in cases {
        let hosts: Vec<&str> = hosts.split_whitespace().collect();
        assert_eq!(compress(&hosts), *want, "compressing {hosts:?}");
        assert_eq!(expand(want).expect(want), hosts, "round trip of {want:?}");
    }
}

/// Each bad expression and the byte position its error must point at.
#[test]
fn errors_point_at_the_problem() {
    let cases: &[(&str, usize)] = &[
        ("cn[1-2", 2),                 // never closed
        ("cn1-2]", 5),                 // no '['
        ("cn[1[2]]", 4),               // nested
        ("cn[]", 3),                   // empty
        ("cn[1,,2]", 5),               // empty piece
        ("cn[5-1]", 3),                // backwards
        ("cn[1-x]", 5),                // not a digit
        ("cn[a]", 3),                  // not a digit
        ("a,cn[1-2-3]", 8),            // second '-' is not a digit
        ("n[1-9999]x[1-9999]", 0),     // absurd size
        ("n[1-99999999]", 2),          // absurd range
        ("n[1234567890123456789]", 2), // too many digits
    ];
    for (expr, pos) in cases {
        match expand(expr) {
            Err(Error::Hostlist {
                pos: got, input, ..
            }) => {
                assert_eq!(
                    (got, input.as_str()),
                    (*pos, *expr),
                    "position for {expr:?}"
                );
            }
            other => panic!("{expr:?} should fail, got {other:?}"),
        }
    }
}

#[test]
fn error_message_names_expression_and_position() {
    let e = expand("cn[5-1]").expect_err("backwards range");
    let msg = e.to_string();
    assert!(
        msg.contains("cn[5-1]") && msg.contains("position 3"),
        "{msg}"
    );
}

#[test]
fn big_ranges_expand_quickly() {
    let hosts = expand("cn[00001-68160]").expect("valid");
    assert_eq!(hosts.len(), 68_160);
    assert_eq!(compress(&hosts), "cn[00001-68160]");
}

/// Host names with an optional numeric suffix, drawn from a small alphabet so that prefixes
/// collide and ranges form.
fn host() -> impl Strategy<Value = String> {
    (
        "[ab]{1,2}(-[xy])?",
        proptest::option::of((0u64..40, 0usize..4)),
    )
        .prop_map(|(p, n)| match n {
            None => p,
            Some((n, pad)) => format!("{p}{n:0pad$}"),
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn compress_then_expand_is_identity(hosts in proptest::collection::vec(host(), 0..40)) {
        let mut seen = std::collections::HashSet::new();
        let hosts: Vec<String> = hosts.into_iter().filter(|h| seen.insert(h.clone())).collect();
        let expr = compress(&hosts);
        prop_assert_eq!(expand(&expr).expect("compress output parses"), hosts);
    }

    #[test]
    fn expand_then_compress_is_stable(
        parts in proptest::collection::vec(("[ab]{1,2}", 0u64..30, 0u64..12, 1usize..4), 1..6)
    ) {
        let expr = parts
            .iter()
            .map(|(p, lo, len, w)| format!("{p}[{lo:0w$}-{:0w$}]", lo + len))
            .collect::<Vec<_>>()
            .join(",");
        let hosts = expand(&expr).expect("generated expressions are valid");
        let again = expand(&compress(&hosts)).expect("compress output parses");
        prop_assert_eq!(&again, &hosts);
        prop_assert_eq!(compress(&again), compress(&hosts));
    }

    #[test]
    fn garbage_never_panics(s in "[a-c0-9\\[\\],\\- ]{0,20}") {
        let _ = expand(&s);
    }
}
