//! What a program that rewrites samples (sysport's relabelling) needs from an exposition: a
//! sample's label pairs and their values unescaped, an exposition without some of its families
//! or samples (still pointing into the same body), and text 0.0.4 lines made from a sample's
//! parts, to build a body of rewritten samples that [`super::parse()`] then reads.

use std::borrow::Cow;

use crate::format::Format;
use crate::model::{Exposition, Family, Sample};
use crate::text::{write_help_as_text, write_seconds_as_millis};

/// A label value as written in an exposition (`\\`, `\"` and `\n` escaped), unescaped.
pub fn unescape_label_value(raw: &[u8]) -> Cow<'_, [u8]> {
    if memchr::memchr(b'\\', raw).is_none() {
        return Cow::Borrowed(raw);
    }
    let mut out = Vec::with_capacity(raw.len());
    let mut bytes = raw.iter();
    while let Some(&b) = bytes.next() {
        match (b, bytes.as_slice().first()) {
            (b'\\', Some(b'n')) => {
                out.push(b'\n');
                bytes.next();
            }
            (b'\\', Some(&c @ (b'\\' | b'"'))) => {
                out.push(c);
                bytes.next();
            }
            (b, _) => out.push(b),
        }
    }
    Cow::Owned(out)
}

/// Appends `value` escaped for a label value in either format (`\\`, `\"`, `\n`).
pub fn escape_label_value(value: &[u8], out: &mut Vec<u8>) {
    let mut from = 0;
    for at in memchr::memchr3_iter(b'\\', b'"', b'\n', value) {
        out.extend_from_slice(&value[from..at]);
        out.extend_from_slice(match value[at] {
            b'\\' => b"\\\\",
            b'"' => b"\\\"",
            _ => b"\\n",
        });
        from = at + 1;
    }
    out.extend_from_slice(&value[from..]);
}

impl Sample {
    /// Whether the sample's name is known to be the one of the sample before it in the
    /// exposition (`false` when not known).
    #[inline]
    pub fn repeats_name(&self) -> bool {
        self.same_name_as_previous()
    }
}

impl Exposition {
    /// The exposition without the families `keep_family` refuses (by index) and without the
    /// samples `drop` lists (indices into [`Exposition::all_samples`], ascending). A family
    /// left without samples goes too; one that had none stays. The body is shared, not copied.
    pub fn retain(&self, mut keep_family: impl FnMut(usize) -> bool, drop: &[u32]) -> Exposition {
        let mut drop = drop.iter().copied().peekable();
        let mut families = Vec::with_capacity(self.families.len());
        let mut samples = Vec::with_capacity(self.samples.len().saturating_sub(drop.len()));
        let mut kept_bytes = 0;
        let mut last_taken = None;
        for (fi, f) in self.families.iter().enumerate() {
            let (start, end) = f.samples;
            if !keep_family(fi) {
                while drop.next_if(|&d| d < end).is_some() {}
                continue;
            }
            let first = samples.len();
            let family = families.len() as u32;
            for i in start..end {
                if drop.next_if_eq(&i).is_some() {
                    continue;
                }
                let mut s = self.samples[i as usize];
                s.set_family(family);
                if last_taken.is_none_or(|last| last + 1 != i) {
                    s.set_same_name_as_previous(false);
                }
                last_taken = Some(i);
                kept_bytes += s.line_len(&self.side) + 1;
                samples.push(s);
            }
            if samples.len() == first && end > start {
                continue;
            }
            families.push(Family {
                samples: (first as u32, samples.len() as u32),
                ..f.clone()
            });
        }
        Exposition {
            body: self.body.clone(),
            format: self.format,
            families,
            samples,
            side: self.side.clone(),
            stats: self.stats,
            kept_bytes,
            lexed_with: self.lexed_with,
            by_name: Default::default(),
        }
    }

    /// The exposition with every sample counted as carrying each label sysport adds: merging
    /// adds none of them to its samples. For a body whose lines already hold the label set
    /// they are to be served with.
    pub fn with_added_labels_written(mut self) -> Exposition {
        for s in &mut self.samples {
            s.present = u8::MAX;
        }
        for side in &mut self.side {
            side.lex.present = u8::MAX;
        }
        self
    }

    /// Appends the family's `# HELP` and `# TYPE` lines (those it has) in text 0.0.4.
    pub fn write_text_header(&self, family: &Family, out: &mut Vec<u8>) {
        let (base, suffix) = self.family_name(family);
        if let Some(help) = family.help {
            out.extend_from_slice(b"# HELP ");
            out.extend_from_slice(base);
            out.extend_from_slice(suffix);
            out.push(b' ');
            write_help_as_text(help.of(&self.body), self.format, out);
            out.push(b'\n');
        }
        if family.typed {
            out.extend_from_slice(b"# TYPE ");
            out.extend_from_slice(base);
            out.extend_from_slice(suffix);
            out.push(b' ');
            out.extend_from_slice(family.kind.text_name().as_bytes());
            out.push(b'\n');
        }
    }

    /// Appends the sample's value and timestamp, if any, as text 0.0.4 writes them after the
    /// labels: ` value[ timestamp]` (an OpenMetrics timestamp in seconds becomes milliseconds).
    pub fn write_text_value(&self, s: &Sample, out: &mut Vec<u8>) {
        let lex = self.lex(s);
        out.push(b' ');
        out.extend_from_slice(self.sample_part(s, lex.value));
        if lex.timestamp.0 != lex.timestamp.1 {
            out.push(b' ');
            let ts = self.sample_part(s, lex.timestamp);
            match self.format {
                Format::Text => out.extend_from_slice(ts),
                Format::OpenMetrics => write_seconds_as_millis(ts, out),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::hash::PairHasher;
    use crate::merge::{AddedLabel, MergeOptions, merge};
    use crate::parse::{ParseLimits, ParseOptions, parse};
    use crate::text::write_text;

    const PAGE: &str = "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\"} 1\n\
                        a_total{x=\"2\"} 2\na_total{x=\"3\"} 3\n# TYPE b gauge\nb 4\n\
                        # TYPE c gauge\nc{v=\"q\\\"\\\\\\n\"} 5 1700000000000\n";

    fn opts<'a>(keep: &'a [String], added: &'a [&'a [u8]]) -> ParseOptions<'a> {
        ParseOptions {
            keep,
            limits: ParseLimits {
                max_line_bytes: 1 << 20,
                max_series: 1000,
                max_families: 1000,
                max_labels: 16,
                max_label_value_bytes: 1 << 10,
            },
            added_labels: added,
            hasher: PairHasher::new(7),
            allow_reserved: false,
        }
    }

    fn text(exp: &Exposition, added: &[AddedLabel]) -> String {
        let sources = [exp];
        let m = merge(
            &sources,
            &MergeOptions {
                added,
                names: None,
                hasher: PairHasher::new(7),
            },
        );
        let mut out = Vec::new();
        write_text(&m, &mut out);
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn escaping_round_trips_the_three_escapes() {
        let raw = br#"q\"\\\n and \x"#;
        let plain = unescape_label_value(raw);
        assert_eq!(plain.as_ref(), b"q\"\\\n and \\x");
        let mut again = Vec::new();
        escape_label_value(&plain, &mut again);
        assert_eq!(again, br#"q\"\\\n and \\x"#);
        assert!(matches!(unescape_label_value(b"plain"), Cow::Borrowed(_)));
    }

    #[test]
    fn retained_families_and_samples_are_served_as_before_and_the_rest_go() {
        let keep = ["".to_owned()];
        let exp = parse(Bytes::from(PAGE), Format::Text, &opts(&keep, &[])).expect("parse");
        // Drop the middle sample of a_total, all of b; c stays whole.
        let kept = exp.retain(|fi| fi != 1, &[1]);
        assert_eq!(
            text(&kept, &[]),
            "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\"} 1\na_total{x=\"3\"} 3\n\
             # TYPE c gauge\nc{v=\"q\\\"\\\\\\n\"} 5 1700000000000\n"
        );
        assert!(std::ptr::eq(kept.body().as_ptr(), exp.body().as_ptr()));
        // A family whose samples all go disappears with its HELP and TYPE.
        let kept = exp.retain(|_| true, &[0, 1, 2]);
        assert!(!text(&kept, &[]).contains("a_total"));
    }

    #[test]
    fn a_body_marked_as_labelled_gets_no_added_labels() {
        let keep = ["".to_owned()];
        let names: [&[u8]; 1] = [b"w"];
        let body = "b{x=\"1\"} 4\nb{x=\"2\",w=\"own\"} 5\n";
        let added = [AddedLabel::new("w", "sp")];
        let exp = parse(Bytes::from(body), Format::Text, &opts(&keep, &names)).expect("parse");
        assert_eq!(
            text(&exp, &added),
            "b{x=\"1\",w=\"sp\"} 4\nb{x=\"2\",w=\"own\"} 5\n"
        );
        let exp = exp.with_added_labels_written();
        assert_eq!(text(&exp, &added), body);
    }

    #[test]
    fn headers_and_values_are_written_as_text() {
        let keep = ["".to_owned()];
        let om = "# TYPE c counter\n# HELP c Say \\\"hi\\\".\nc_total 1.5 1700000000.25\n# EOF\n";
        let exp = parse(Bytes::from(om), Format::OpenMetrics, &opts(&keep, &[])).expect("parse");
        let fam = &exp.families()[0];
        let mut out = Vec::new();
        exp.write_text_header(fam, &mut out);
        out.extend_from_slice(b"c_total");
        exp.write_text_value(&exp.samples(fam)[0], &mut out);
        out.push(b'\n');
        assert_eq!(
            String::from_utf8(out).expect("utf-8"),
            "# HELP c_total Say \"hi\".\n# TYPE c_total counter\nc_total 1.5 1700000000250\n"
        );
    }
}
