use super::*;
use crate::net::pki::{CA_CERT, CA_KEY, make_cluster, read_cert, read_crl, read_string, revoke};

fn hosts(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

fn numbered(number: Option<u64>, next_update: Option<i64>) -> CrlFacts {
    CrlFacts {
        number,
        this_update: 1_000,
        next_update,
        revoked: Vec::new(),
    }
}

const NOW: i64 = 2_000_000_000;

#[test]
fn judge_installs_only_a_strictly_newer_current_list() {
    let held = numbered(Some(3), None);
    assert_eq!(judge(None, &numbered(Some(1), None), NOW), Verdict::Install);
    assert_eq!(
        judge(Some(&held), &numbered(Some(4), Some(NOW + 1)), NOW),
        Verdict::Install
    );
    assert_eq!(
        judge(Some(&held), &numbered(Some(3), None), NOW),
        Verdict::Same
    );
    assert_eq!(
        judge(Some(&held), &numbered(Some(2), None), NOW),
        Verdict::Older { held: 3 }
    );
    // A list made by another tool without a number is replaced by any numbered one.
    assert_eq!(
        judge(Some(&numbered(None, None)), &numbered(Some(1), None), NOW),
        Verdict::Install
    );
}

#[test]
fn judge_refuses_a_list_past_its_next_update_or_without_a_number() {
    let held = numbered(Some(3), None);
    let Verdict::Refused(why) = judge(Some(&held), &numbered(Some(9), Some(NOW - 5)), NOW) else {
        panic!("an expired list was not refused");
    };
    assert!(why.contains("past its next update (5 s ago)"), "{why}");
    let Verdict::Refused(why) = judge(None, &numbered(None, None), NOW) else {
        panic!("a list without a number was not refused");
    };
    assert!(why.contains("no CRL number"), "{why}");
}

#[test]
fn verify_reads_what_keygen_revoke_wrote_and_pem_gives_back_its_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    make_cluster(dir.path(), &hosts(&["a", "b"])).expect("cluster");
    let serial = revoke(dir.path(), &hosts(&["b"])).expect("revoke");
    revoke(dir.path(), &hosts(&["b"])).expect("again: number 2");
    let der = read_crl(&dir.path().join(CRL)).expect("crl");
    let ca = read_cert(&dir.path().join(CA_CERT)).expect("ca");
    let facts = verify(&der, &ca).expect("signed by the CA");
    assert_eq!(facts.number, Some(2));
    assert_eq!(
        facts.revoked.iter().map(hex::encode).collect::<Vec<_>>(),
        serial
    );
    assert!(facts.next_update.is_some_and(|n| n > facts.this_update));
    let written = std::fs::read_to_string(dir.path().join(CRL)).expect("read");
    assert_eq!(pem(&der), written, "the same bytes as keygen writes");

    let out = tempfile::tempdir().expect("tempdir");
    install(out.path(), &der).expect("install");
    assert_eq!(
        std::fs::read_to_string(out.path().join(CRL)).expect("installed"),
        written
    );
}

#[test]
fn verify_refuses_another_clusters_list_and_corrupt_bytes() {
    let ours = tempfile::tempdir().expect("tempdir");
    let theirs = tempfile::tempdir().expect("tempdir");
    make_cluster(ours.path(), &hosts(&["a"])).expect("ours");
    make_cluster(theirs.path(), &hosts(&["a"])).expect("theirs");
    revoke(theirs.path(), &hosts(&["a"])).expect("revoke");
    let ca = read_cert(&ours.path().join(CA_CERT)).expect("ca");
    let forged = read_crl(&theirs.path().join(CRL)).expect("crl");
    let err = verify(&forged, &ca).expect_err("another CA's list");
    assert!(
        err.to_string().contains("not by this cluster's CA"),
        "{err}"
    );

    // Their list under our CA's name: the name matches, the signature does not.
    let params = rcgen::CertificateRevocationListParams {
        this_update: time::OffsetDateTime::now_utc(),
        next_update: time::OffsetDateTime::now_utc() + time::Duration::DAY,
        crl_number: rcgen::SerialNumber::from(7u64),
        issuing_distribution_point: None,
        revoked_certs: Vec::new(),
        key_identifier_method: rcgen::KeyIdMethod::Sha256,
    };
    let theirs_key =
        rcgen::KeyPair::from_pem(&read_string(&theirs.path().join(CA_KEY)).expect("key"))
            .expect("their CA key");
    let impostor = rcgen::Issuer::from_ca_cert_der(&ca, theirs_key).expect("our CA's name");
    let forged = params.signed_by(&impostor).expect("sign");
    let err = verify(forged.der(), &ca).expect_err("a forged signature");
    assert!(
        err.to_string().contains("signature does not check out"),
        "{err}"
    );

    let ours_crl = {
        revoke(ours.path(), &hosts(&["a"])).expect("revoke");
        read_crl(&ours.path().join(CRL)).expect("crl")
    };
    let mut corrupt = ours_crl.to_vec();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 1;
    let err = verify(&corrupt, &ca).expect_err("a flipped bit");
    assert!(err.to_string().contains("signature"), "{err}");
    let err = verify(&ours_crl[..ours_crl.len() / 2], &ca).expect_err("half a list");
    assert!(err.to_string().contains("not a revocation list"), "{err}");
}
