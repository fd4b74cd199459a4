//! Strict readers of the numbers and bodies of requests.
//!
//! Numbers of milliseconds and counts are read by [`WholeMillis`] and [`Count`], which accept only
//! whole non-negative JSON numbers and say so in their error: a negative, fractional or huge
//! number is a 400 naming the field, never a wrap-around. A task body ([`BodyText`]) is text;
//! a client that sends a JSON object or array instead gets it stored as its JSON text.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

/// A number of milliseconds as a request carries it: the wire form of
/// [`delayq_core::Millis`], read strictly (a whole JSON number from 0 up; no sign, fraction or
/// string).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct WholeMillis(pub u64);

/// A whole, non-negative count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Count(pub u64);

struct WholeVisitor(&'static str);

impl Visitor<'_> for WholeVisitor {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        Ok(v)
    }
}

impl<'de> Deserialize<'de> for WholeMillis {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_u64(WholeVisitor(
            "a whole number of milliseconds from 0 to 18446744073709551615",
        ))
        .map(WholeMillis)
    }
}

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_u64(WholeVisitor("a whole number, 0 or more"))
            .map(Count)
    }
}

/// The field names serde reads a struct `T` with (a plain derived struct; one with a
/// flattened field has none to give, and yields an empty list).
pub(crate) fn struct_fields<T: de::DeserializeOwned>() -> &'static [&'static str] {
    /// A deserializer that only records the field names a struct asks for.
    struct Probe<'a>(&'a mut &'static [&'static str]);

    impl<'de> Deserializer<'de> for Probe<'_> {
        type Error = de::value::Error;

        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("not a struct"))
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            // The fields are all that was wanted; no value is built.
            Err(de::Error::custom("fields read"))
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }

    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(Probe(&mut fields));
    fields
}

/// A task body: text as is, any other JSON value as its JSON text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct BodyText(pub String);

impl<'de> Deserialize<'de> for BodyText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(s) => Ok(BodyText(s)),
            other => Ok(BodyText(other.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_must_be_whole_and_non_negative() {
        let table: [(&str, Option<u64>); 7] = [
            ("0", Some(0)),
            ("5000", Some(5_000)),
            ("18446744073709551615", Some(u64::MAX)),
            ("-1", None),
            ("1.5", None),
            ("1e30", None),
            ("18446744073709551616", None),
        ];
        for (json, want) in table {
            let got = serde_json::from_str::<WholeMillis>(json).ok().map(|m| m.0);
            assert_eq!(got, want, "{json}");
        }
        let err = serde_json::from_str::<WholeMillis>("-1")
            .unwrap_err()
            .to_string();
        assert!(err.contains("whole number of milliseconds"), "{err}");
    }

    #[test]
    fn body_accepts_text_and_json() {
        let table = [
            (r#""plain""#, "plain"),
            (r#"{"order_id":"123"}"#, r#"{"order_id":"123"}"#),
            ("[1,2]", "[1,2]"),
            ("42", "42"),
        ];
        for (json, want) in table {
            assert_eq!(serde_json::from_str::<BodyText>(json).unwrap().0, want);
        }
    }
}
