//! Names the field at a position of a YAML document (`upstreams[0].timeout`).
//!
//! The YAML parser reports where a schema error is (an unknown key, a list where a string was
//! expected) but not in which field; this walks a position-annotated copy of the document to
//! the deepest key or item at or before that position.

use std::fmt;

use serde::Deserialize;
use serde::de::{MapAccess, SeqAccess, Visitor};
use serde_saphyr::{DuplicateKeyPolicy, Location, Spanned};

/// Any YAML node, keeping the position of every key and value.
enum Node {
    Map(Vec<(Spanned<String>, Spanned<Node>)>),
    Seq(Vec<Spanned<Node>>),
    Scalar,
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NodeVisitor;

        impl<'de> Visitor<'de> for NodeVisitor {
            type Value = Node;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any YAML node")
            }

            fn visit_bool<E>(self, _: bool) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_str<E>(self, _: &str) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_unit<E>(self) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_none<E>(self) -> Result<Node, E> {
                Ok(Node::Scalar)
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Node::Seq(items))
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = map.next_key()? {
                    entries.push((key, map.next_value()?));
                }
                Ok(Node::Map(entries))
            }
        }

        deserializer.deserialize_any(NodeVisitor)
    }
}

fn position(location: &Location) -> (u64, u64) {
    (location.line(), location.column())
}

/// The path of the field at `location` in `source`, or an empty string when the document
/// cannot be walked (a syntax error) or the position is outside every field.
pub(crate) fn field_at(source: &str, location: &Location) -> String {
    // Keep repeated keys, so that a duplicate-key error can be named too.
    let options = serde_saphyr::options! { duplicate_keys: DuplicateKeyPolicy::PassThrough };
    let Ok(root) = serde_saphyr::from_str_with_options::<Spanned<Node>>(source, options) else {
        return String::new();
    };
    let target = position(location);
    let mut path = String::new();
    let mut node = &root;
    loop {
        match &node.value {
            Node::Map(entries) => {
                let Some((key, value)) = entries
                    .iter()
                    .rev()
                    .find(|(key, _)| position(&key.referenced) <= target)
                else {
                    break;
                };
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(&key.value);
                if position(&value.referenced) > target {
                    break;
                }
                node = value;
            }
            Node::Seq(items) => {
                let Some((index, item)) = items
                    .iter()
                    .enumerate()
                    .rev()
                    .find(|(_, item)| position(&item.referenced) <= target)
                else {
                    break;
                };
                path.push_str(&format!("[{index}]"));
                node = item;
            }
            Node::Scalar => break,
        }
    }
    path
}
