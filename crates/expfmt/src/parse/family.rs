//! Family resolution: which declaration, and which text 0.0.4 family, a sample line belongs to.
//!
//! Names are declared by HELP, TYPE and UNIT lines, or implied by a sample whose name nothing
//! declared. A sample name resolves to the family in force when it fits it, else to its exact
//! name, else to its name minus a type suffix, else (OpenMetrics renderers with
//! prometheus/client_python#1177) to a declared name with `:` written as `_`.

use super::{Decl, NONE, Parser};
use crate::format::Format;
use crate::model::{Family, Kind, NoDuplicates, RESERVED_PREFIX, Role, Span, Suffix};

impl Parser<'_, '_> {
    /// Adds the declarations with `:` made since the last call to the escaped-name index.
    pub(super) fn index_escaped(&mut self) {
        for &d in &self.colon_decls[self.escaped_indexed..] {
            let escaped: Vec<u8> = self.decls[d as usize]
                .name
                .of(self.body)
                .iter()
                .map(|&b| if b == b':' { b'_' } else { b })
                .collect();
            self.by_escaped.entry(escaped).or_insert(d);
        }
        self.escaped_indexed = self.colon_decls.len();
    }

    /// Finds or creates the declaration for a name.
    pub(super) fn declare(&mut self, name: Span) -> u32 {
        self.declare_hashed(name, self.opts.hasher.bytes(name.of(self.body)))
    }

    /// [`Parser::declare`], `hash` being the hash of the name.
    pub(super) fn declare_hashed(&mut self, name: Span, hash: u64) -> u32 {
        let bytes = name.of(self.body);
        if let Some(d) = self.lookup_hashed(hash, bytes) {
            return d;
        }
        let d = self.decls.len() as u32;
        let kept = self.keeps(bytes);
        let has_colon = memchr::memchr(b':', bytes).is_some();
        if has_colon {
            self.colon_decls.push(d);
        }
        let primary = self.new_family(name, Suffix::None, Kind::Untyped, Role::Primary, kept);
        self.decls.push(Decl {
            name,
            kind: None,
            has_colon,
            kept,
            has_samples: false,
            families: [primary, NONE, NONE, NONE],
            probed: 0,
            next: NONE,
        });
        if let Some(head) = self.by_name.insert(hash, d) {
            self.decls[d as usize].next = head;
        }
        d
    }

    /// The declaration of `name`, if any.
    pub(super) fn lookup(&self, name: &[u8]) -> Option<u32> {
        self.lookup_hashed(self.opts.hasher.bytes(name), name)
    }

    pub(super) fn lookup_hashed(&self, hash: u64, name: &[u8]) -> Option<u32> {
        let mut d = *self.by_name.get(&hash)?;
        loop {
            let decl = &self.decls[d as usize];
            if decl.name.of(self.body) == name {
                return Some(d);
            }
            if decl.next == NONE {
                return None;
            }
            d = decl.next;
        }
    }

    fn keeps(&self, name: &[u8]) -> bool {
        (self.opts.allow_reserved || !name.starts_with(RESERVED_PREFIX))
            && self
                .opts
                .keep
                .iter()
                .any(|p| name.starts_with(p.as_bytes()))
    }

    fn new_family(
        &mut self,
        base: Span,
        suffix: Suffix,
        kind: Kind,
        role: Role,
        kept: bool,
    ) -> u32 {
        let f = self.families.len() as u32;
        self.families.push(Family {
            base,
            suffix,
            kind,
            typed: false,
            declared: kind,
            role,
            help: None,
            unit: None,
            samples: (0, 0),
            no_duplicates: NoDuplicates::default(),
        });
        if kept {
            self.kept_index.push(self.kept_counts.len() as u32);
            self.kept_counts.push(0);
        } else {
            self.kept_index.push(NONE);
        }
        f
    }

    pub(super) fn set_kind(&mut self, d: u32, kind: Kind) {
        let decl = &mut self.decls[d as usize];
        decl.kind = Some(kind);
        let fam = &mut self.families[decl.families[0] as usize];
        fam.typed = true;
        fam.declared = kind;
        match self.format {
            Format::Text => {
                fam.kind = match kind {
                    Kind::Info | Kind::StateSet => Kind::Gauge,
                    Kind::GaugeHistogram => Kind::Histogram,
                    k => k,
                };
            }
            Format::OpenMetrics => {
                // prometheus_client's own mapping from OpenMetrics types to text 0.0.4.
                let (suffix, text_kind) = match kind {
                    Kind::Counter => (Suffix::Total, Kind::Counter),
                    Kind::Info => (Suffix::Info, Kind::Gauge),
                    Kind::StateSet => (Suffix::None, Kind::Gauge),
                    Kind::GaugeHistogram => (Suffix::None, Kind::Histogram),
                    k => (Suffix::None, k),
                };
                fam.suffix = suffix;
                fam.kind = text_kind;
            }
        }
    }

    /// Which suffixes a declaration's samples may carry, in the upstream's format.
    fn suffix_allowed(&self, kind: Option<Kind>, suffix: Suffix) -> bool {
        use Suffix as S;
        match (self.format, kind) {
            (Format::Text, Some(Kind::Histogram | Kind::GaugeHistogram)) => {
                matches!(suffix, S::Bucket | S::Count | S::Sum)
            }
            (Format::Text, Some(Kind::Summary)) => matches!(suffix, S::None | S::Count | S::Sum),
            (Format::Text, _) => suffix == S::None,
            (Format::OpenMetrics, Some(Kind::Counter)) => matches!(suffix, S::Total | S::Created),
            (Format::OpenMetrics, Some(Kind::Histogram)) => {
                matches!(suffix, S::Bucket | S::Count | S::Sum | S::Created)
            }
            (Format::OpenMetrics, Some(Kind::Summary)) => {
                matches!(suffix, S::None | S::Count | S::Sum | S::Created)
            }
            (Format::OpenMetrics, Some(Kind::GaugeHistogram)) => {
                matches!(suffix, S::Bucket | S::GCount | S::GSum)
            }
            (Format::OpenMetrics, Some(Kind::Info)) => suffix == S::Info,
            (Format::OpenMetrics, _) => suffix == S::None,
        }
    }

    /// Does `name` belong to declaration `d`? Returns the suffix and whether the name was the
    /// escaped form of the declared one.
    fn matches(&self, d: u32, name: &[u8]) -> Option<(Suffix, bool)> {
        let decl = &self.decls[d as usize];
        let base = decl.name.of(self.body);
        if name.len() < base.len() {
            return None;
        }
        let (head, tail) = name.split_at(base.len());
        let escaped = if head == base {
            false
        } else if decl.has_colon && escaped_eq(head, base) {
            true
        } else {
            return None;
        };
        let suffix = Suffix::parse(tail)?;
        self.suffix_allowed(decl.kind, suffix)
            .then_some((suffix, escaped))
    }

    /// Resolves a sample name to its declaration; `None` when the name was declared with a type
    /// whose samples cannot carry it (`# TYPE x counter` in OpenMetrics, then a sample `x`).
    pub(super) fn resolve(&mut self, name_span: Span) -> Option<(u32, Suffix, bool)> {
        let name = name_span.of(self.body);
        if self.current != NONE
            && let Some((s, e)) = self.matches(self.current, name)
        {
            return Some((self.current, s, e));
        }
        if let Some(d) = self.lookup(name)
            && let Some((s, e)) = self.matches(d, name)
        {
            return Some((d, s, e));
        }
        let found = self.resolve_further(name_span);
        if self.record_probes {
            self.probe(name_span, found);
        }
        found
    }

    /// Notes a sample name [`Parser::resolve_further`] resolved to `found`, once per
    /// declaration and suffix it stands for (escaped names every time).
    fn probe(&mut self, name: Span, found: Option<(u32, Suffix, bool)>) {
        let exact = match found {
            Some((d, s, false)) => Some((d, s)),
            Some((_, _, true)) => None,
            None => self.lookup(name.of(self.body)).map(|d| (d, Suffix::None)),
        };
        if let Some((d, s)) = exact {
            let bit = 1u16 << s as u32;
            let decl = &mut self.decls[d as usize];
            if decl.probed & bit != 0 {
                return;
            }
            decl.probed |= bit;
        }
        self.probes.push(name);
    }

    /// [`Parser::resolve`] past the family in force and the exact name.
    fn resolve_further(&mut self, name_span: Span) -> Option<(u32, Suffix, bool)> {
        let name = name_span.of(self.body);
        for suffix in Suffix::ALL {
            if let Some(base) = name.strip_suffix(suffix.as_bytes())
                && let Some(d) = self.lookup(base)
                && let Some((s, e)) = self.matches(d, name)
            {
                return Some((d, s, e));
            }
        }
        // Escaped names (`vllm_x_total` for `vllm:x`) only come from OpenMetrics renderers with
        // client_python#1177: the escaped index is built on the first name that needs it.
        self.index_escaped();
        for suffix in Suffix::ALL {
            if let Some(base) = name.strip_suffix(suffix.as_bytes())
                && let Some(&d) = self.by_escaped.get(base)
                && let Some((s, e)) = self.matches(d, name)
            {
                return Some((d, s, e));
            }
        }
        if let Some(&d) = self.by_escaped.get(name)
            && let Some((s, e)) = self.matches(d, name)
        {
            return Some((d, s, e));
        }
        if self.lookup(name).is_some() {
            return None;
        }
        // A name of its own: an untyped family with no HELP.
        Some((self.declare(name_span), Suffix::None, false))
    }

    /// The text family a sample of `d` with `suffix` goes to, made on first use.
    pub(super) fn family_for(&mut self, d: u32, suffix: Suffix) -> u32 {
        let decl = &self.decls[d as usize];
        let (slot, role) = family_slot(self.format, suffix);
        if decl.families[slot] != NONE {
            return decl.families[slot];
        }
        let (name, kept, primary) = (decl.name, decl.kept, decl.families[0] as usize);
        let help = self.families[primary].help;
        let f = self.new_family(name, suffix, Kind::Gauge, role, kept);
        let fam = &mut self.families[f as usize];
        fam.typed = true;
        fam.help = help;
        self.decls[d as usize].families[slot] = f;
        f
    }
}

/// The slot of a declaration's families (`Decl::families`) that its samples with `suffix` go
/// to, and that family's role.
pub(super) fn family_slot(format: Format, suffix: Suffix) -> (usize, Role) {
    match (format, suffix) {
        (Format::OpenMetrics, Suffix::Created) => (1, Role::Created),
        (Format::OpenMetrics, Suffix::GCount) => (2, Role::GCount),
        (Format::OpenMetrics, Suffix::GSum) => (3, Role::GSum),
        _ => (0, Role::Primary),
    }
}

/// `a` equals `b` where `b` may have `:` and `a` has `_` in its place.
fn escaped_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(&x, &y)| x == y || (y == b':' && x == b'_'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::PairHasher;
    use crate::parse::ParseOptions;

    #[test]
    fn names_with_equal_hashes_are_told_apart() {
        // A keyed 64-bit hash makes a collision between real names all but impossible, so the
        // chain of declarations sharing a hash is exercised with a hash given by hand.
        let body = b"vllm:a vllm:b vllm:c";
        let keep = ["vllm:".to_string()];
        let opts = ParseOptions {
            keep: &keep,
            limits: crate::testing::LIMITS,
            added_labels: &[],
            hasher: PairHasher::new(1),
            allow_reserved: false,
        };
        let mut p = Parser::new(body, Format::Text, &opts, None, body.len());
        let (a, b) = (Span::new(0, 6), Span::new(7, 13));
        let da = p.declare_hashed(a, 42);
        let db = p.declare_hashed(b, 42);
        assert_ne!(da, db);
        assert_eq!(p.declare_hashed(a, 42), da, "declared once");
        assert_eq!(p.declare_hashed(b, 42), db, "declared once");
        assert_eq!(p.lookup_hashed(42, b"vllm:a"), Some(da));
        assert_eq!(p.lookup_hashed(42, b"vllm:b"), Some(db));
        assert_eq!(p.lookup_hashed(42, b"vllm:c"), None);
        assert_eq!(p.lookup_hashed(43, b"vllm:a"), None);
    }
}
