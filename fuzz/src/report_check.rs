//! What the `report` fuzz target asserts about one input: the push report reader
//! (`pushreport::from_json`) refuses or accepts any bytes without panicking, and a report it
//! accepts draws as SVG and as an HTML page. A plain function, so that the same check runs
//! under libFuzzer (`fuzz/fuzz_targets/report.rs`) and as an ordinary test over the
//! committed corpus (`pushreport/tests/fuzz_corpus.rs` includes this file by path).

use pushreport::Limits;

/// The reader's limits in the harness: the defaults, with the lists cut so that one input
/// draws within libFuzzer's time per input (drawing is linear; the cut only bounds the
/// constant).
pub fn limits() -> Limits {
    Limits {
        max_input: 1 << 20,
        max_nodes: 4096,
        max_entries: 8192,
        ..Limits::default()
    }
}

/// A push report's JSON: refused, or read and drawn.
pub fn report(data: &[u8]) {
    let Ok(rep) = pushreport::from_json(data, &limits()) else {
        return;
    };
    let title = pushreport::title(&rep);
    let svg = pushreport::svg(&rep, &title).expect("a report the reader accepts draws");
    assert!(svg.starts_with("<svg"), "the picture is not an SVG");
    let page = pushreport::html(&rep, &title).expect("a report the reader accepts draws a page");
    assert!(page.starts_with("<!doctype html>"), "the page is not HTML");
}
