//! The last step of an exposition: prometheus-client writes OpenMetrics with the samples of
//! a family in hash order; this pass sorts them (a stable, testable scrape) and, for the
//! Prometheus text format 0.0.4, rewrites what differs between the two formats. Pure text
//! in, text out.

/// Finishes prometheus-client's OpenMetrics output in one pass: the samples of each counter
/// and gauge family sorted (prometheus-client keeps them in hash order; sorted, the
/// exposition is stable from scrape to scrape and testable; histogram lines keep their
/// order), and, unless `openmetrics`, rewritten to the Prometheus text format 0.0.4: a
/// counter family `x` is announced as `x_total` (its samples already are), `# UNIT` and
/// `# EOF` lines go. Escaping and everything else are the same in both formats.
pub fn finish_exposition(om: &str, openmetrics: bool) -> String {
    let mut out = String::with_capacity(om.len() + 1024);
    let mut block: Vec<&str> = Vec::new();
    let mut sortable = false;
    let mut help: Option<&str> = None;
    fn flush(block: &mut Vec<&str>, out: &mut String, sortable: bool) {
        if sortable {
            block.sort_unstable();
        }
        for l in block.drain(..) {
            out.push_str(l);
            out.push('\n');
        }
    }
    for line in om.lines() {
        if !line.starts_with('#') {
            block.push(line);
            continue;
        }
        flush(&mut block, &mut out, sortable);
        if let Some(rest) = line.strip_prefix("# HELP ") {
            // Held until its TYPE line says whether the name needs `_total`.
            if let Some(h) = help.replace(rest) {
                out.push_str("# HELP ");
                out.push_str(h);
                out.push('\n');
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            sortable = rest.ends_with(" counter") || rest.ends_with(" gauge");
            let name = rest.split(' ').next().unwrap_or("");
            let rename = !openmetrics && rest.ends_with(" counter") && !name.ends_with("_total");
            for (prefix, text) in [("# HELP ", help.take()), ("# TYPE ", Some(rest))] {
                let Some(text) = text else { continue };
                out.push_str(prefix);
                if rename && let Some(tail) = text.strip_prefix(name) {
                    out.push_str(name);
                    out.push_str("_total");
                    out.push_str(tail);
                } else {
                    out.push_str(text);
                }
                out.push('\n');
            }
            continue;
        }
        if !openmetrics && (line == "# EOF" || line.starts_with("# UNIT ")) {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    flush(&mut block, &mut out, sortable);
    if let Some(h) = help {
        out.push_str("# HELP ");
        out.push_str(h);
        out.push('\n');
    }
    out
}
