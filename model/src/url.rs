//! Percent-encoding for URLs the server, the pages and `lockscope admin` build.
//!
//! A lock name or fleet that goes into a URL **path** is one path segment: it is
//! encoded with [`segment`], never with form encoding (which writes a space as
//! `+`; a path decodes `+` as itself, so `x y` would arrive as the lock
//! `x+y`). Query values may be form-encoded: a query decodes `+` as a space.

/// `s` as one URL path segment: every byte but the unreserved ones (`A-Z a-z
/// 0-9 - . _ ~`) percent-encoded, so `/` is `%2F`, a space `%20`, `+` `%2B`,
/// and non-ASCII text its UTF-8 bytes. Decoding the segment gives `s` back exactly.
pub fn segment(s: &str) -> String {
    percent(s, false)
}

/// `s` as a query value: as [`segment`], but `/` stays as it is (a query
/// reads it as itself, and `name=reports/nightly` stays readable).
pub fn query(s: &str) -> String {
    percent(s, true)
}

fn percent(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => out.push(b as char),
            b'/' if keep_slash => out.push('/'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_is_percent_encoded_never_form_encoded() {
        // docs/api.md: "a space `%20` and a `+` `%2B` … Never form-encode a path segment:
        // form encoding writes a space as `+`, and a path reads `+` as itself".
        assert_eq!(segment("a b"), "a%20b", "a space is %20, never +");
        assert_eq!(segment("a+b"), "a%2Bb", "a plus is %2B, so it is never read as a space");
        assert_eq!(
            segment("reports/nightly"),
            "reports%2Fnightly",
            "a slash stays in the segment"
        );
        assert_eq!(segment("é ✓"), "%C3%A9%20%E2%9C%93", "non-ASCII: its UTF-8 bytes");
        assert_eq!(segment("%2F?#&="), "%252F%3F%23%26%3D");
        assert_eq!(segment("A-z_0.9~"), "A-z_0.9~");
        assert_eq!(segment(""), "");
        assert_eq!(
            query("reports/nightly a+b"),
            "reports/nightly%20a%2Bb",
            "a query value keeps /"
        );
        // Distinct names stay distinct once encoded.
        assert_ne!(segment("fz/x y"), segment("fz/x+y"));
    }
}
