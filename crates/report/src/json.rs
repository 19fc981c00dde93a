//! What every JSON rendering writes: the value exactly as its serde derives shape it (the
//! schemas of `docs/formats.md`), pretty-printed, with a trailing newline. Field names live on
//! the types; nothing is renamed here.

/// Pretty JSON with a trailing newline.
pub(crate) fn pretty<T: serde::Serialize>(value: &T) -> String {
    // Cannot fail for these types: every map key is a `String`, every Serialize impl is
    // derived, and serde_json writes non-finite floats as `null` rather than erroring.
    #[expect(clippy::expect_used, reason = "infallible for these types (the comment above)")]
    let mut out = serde_json::to_string_pretty(value).expect("report types always serialise to JSON");
    out.push('\n');
    out
}
