//! The pieces every section of the file is written with: a scalar with its position ([`Text`]),
//! a mapping that keeps its unknown keys (`section!`), and a mapping of names to values
//! ([`RawLabels`]).
//!
//! Every value may hold `${VAR}` references (see `expand`). In a flow mapping such as
//! `labels: { worker_id: "${POD_NAME}" }` quote the value: `{` and `}` end a flow mapping.

use std::fmt;

use serde::Deserialize;
use serde::de::{MapAccess, Visitor};
use serde_saphyr::Spanned;

/// A scalar value as written in the file, with its position.
pub(crate) type Text = Spanned<String>;

/// Declares one mapping of the file: a struct of optional fields, each the doc comment of a
/// setting, whose `Deserialize` keeps the keys it does not know in `unknown` (with their
/// positions) instead of failing at the first one as `deny_unknown_fields` does, so that a
/// misspelt key is reported with every other problem of the file.
macro_rules! section {
    ($(#[$meta:meta])* $name:ident { $($(#[$field_meta:meta])* $field:ident: $ty:ty,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Default)]
        pub(crate) struct $name {
            $($(#[$field_meta])* pub(crate) $field: Option<$ty>,)*
            /// Keys this mapping does not have, as written.
            pub(crate) unknown: Vec<$crate::config::section::Text>,
        }

        impl $name {
            /// The keys this mapping has.
            pub(crate) const FIELDS: &'static [&'static str] = &[$(stringify!($field)),*];
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct SectionVisitor;

                impl<'de> ::serde::de::Visitor<'de> for SectionVisitor {
                    type Value = $name;

                    fn expecting(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                        f.write_str("a mapping of keys to values")
                    }

                    fn visit_map<A: ::serde::de::MapAccess<'de>>(
                        self,
                        mut map: A,
                    ) -> Result<$name, A::Error> {
                        let mut section = $name::default();
                        while let Some(key) = map.next_key::<$crate::config::section::Text>()? {
                            match key.value.as_str() {
                                $(stringify!($field) => section.$field = map.next_value()?,)*
                                _ => {
                                    map.next_value::<::serde::de::IgnoredAny>()?;
                                    section.unknown.push(key);
                                }
                            }
                        }
                        Ok(section)
                    }
                }

                deserializer.deserialize_map(SectionVisitor)
            }
        }
    };
}

pub(crate) use section;

/// `labels:` as an ordered list of (name, value); the parser rejects duplicate names.
#[derive(Debug, Default)]
pub(crate) struct RawLabels(pub(crate) Vec<(Text, Text)>);

impl<'de> Deserialize<'de> for RawLabels {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct LabelsVisitor;

        impl<'de> Visitor<'de> for LabelsVisitor {
            type Value = RawLabels;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping of label name to value")
            }

            fn visit_unit<E: serde::de::Error>(self) -> Result<RawLabels, E> {
                Ok(RawLabels::default())
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawLabels, A::Error> {
                let mut labels = Vec::new();
                while let Some(name) = map.next_key()? {
                    labels.push((name, map.next_value()?));
                }
                Ok(RawLabels(labels))
            }
        }

        deserializer.deserialize_map(LabelsVisitor)
    }
}
