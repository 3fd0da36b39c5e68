//! The pieces the `sim compare` and `sim multiprog` reports share: the run's
//! settings as table comments, as JSON and as title lines, and the frame,
//! legend and escaping of the hand-written SVG plots.
//!
//! Design: each report computes its numbers once and formats them three
//! ways; what the formats have in common (how a setting or a legend looks)
//! lives here once so the two reports cannot drift apart.

use std::fmt::Write as _;

use serde_json::Value;

/// The settings as `# key: value` lines, one a setting (the text table's head).
pub(crate) fn settings_comments(settings: &[(String, String)]) -> String {
    let mut s = String::new();
    for (k, v) in settings {
        let _ = writeln!(s, "# {k}: {v}");
    }
    s
}

/// The settings as a JSON object of strings.
pub(crate) fn settings_json(settings: &[(String, String)]) -> Value {
    Value::Object(
        settings
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    )
}

/// The settings named in `keys`, in the settings' order, as `key value, …`.
fn pick(settings: &[(String, String)], keys: &[&str]) -> String {
    settings
        .iter()
        .filter(|(k, _)| keys.contains(&k.as_str()))
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Opens an SVG document of `w`×`h` on a white background.
pub(crate) fn open(s: &mut String, w: f64, h: f64) {
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
}

/// Short title lines at `left`: `heading — ` and the settings in `lines[0]`
/// (what was run), then one grey line per further group of keys (the model
/// knobs), 14 px apart.
pub(crate) fn titles(
    s: &mut String,
    left: f64,
    heading: &str,
    settings: &[(String, String)],
    lines: &[&[&str]],
) {
    let Some((first, rest)) = lines.split_first() else {
        return;
    };
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="20" font-size="13">{heading} — {}</text>"#,
        escape(&pick(settings, first))
    );
    for (i, keys) in rest.iter().enumerate() {
        let _ = writeln!(
            s,
            r##"<text x="{left}" y="{}" font-size="11" fill="#555">{}</text>"##,
            38 + 14 * i,
            escape(&pick(settings, keys))
        );
    }
}

/// A legend row at height `y`: a colour square and a name every `step` px
/// from `left + 10`; then closes the document.
pub(crate) fn legend_and_close(
    s: &mut String,
    names: &[&str],
    colors: &[&str],
    left: f64,
    step: f64,
    y: f64,
) {
    for (i, name) in names.iter().enumerate() {
        let x = left + 10.0 + step * i as f64;
        let _ = writeln!(
            s,
            r#"<rect x="{x}" y="{}" width="12" height="12" fill="{}"/><text x="{}" y="{y}">{}</text>"#,
            y - 10.0,
            colors[i % colors.len()],
            x + 16.0,
            escape(name)
        );
    }
    s.push_str("</svg>\n");
}

/// `s` with the characters that would break SVG text escaped.
pub(crate) fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
