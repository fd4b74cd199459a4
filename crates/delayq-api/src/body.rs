//! Task bodies on the wire: a body is any bytes (docs/design.md §1); JSON carries it as text
//! when it is UTF-8 and as standard base64 with `body_encoding: "base64"` otherwise.
//!
//! A producer may send either form: text is stored as its UTF-8 bytes, base64 is decoded.
//! Readers get text whenever the bytes are UTF-8, whatever form the producer used, so a
//! seqdelay client that only knows text bodies sees its bodies unchanged.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use delayq_core::InvalidField;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// How a body is written in JSON.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum BodyEncoding {
    /// The body is the text itself (its UTF-8 bytes).
    #[default]
    Text,
    /// The body is standard base64 (RFC 4648, with padding).
    Base64,
}

/// A body as JSON writes it: the text, and `Some(Base64)` when the bytes are not UTF-8.
pub fn encode_body(body: Vec<u8>) -> (String, Option<BodyEncoding>) {
    match String::from_utf8(body) {
        Ok(text) => (text, None),
        Err(e) => (STANDARD.encode(e.as_bytes()), Some(BodyEncoding::Base64)),
    }
}

/// The bytes of a body sent as `text` in `encoding`; `field` names the body in the error
/// (`body`, `tasks[3].body`).
pub fn decode_body(
    text: String,
    encoding: Option<BodyEncoding>,
    field: &str,
) -> Result<Vec<u8>, InvalidField> {
    match encoding.unwrap_or_default() {
        BodyEncoding::Text => Ok(text.into_bytes()),
        BodyEncoding::Base64 => STANDARD.decode(text.as_bytes()).map_err(|e| {
            InvalidField::new(
                field,
                format!("is not valid base64 (body_encoding is base64): {e}"),
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_round_trip_in_the_shortest_honest_form() {
        // (bytes, text on the wire, encoding on the wire)
        let table: [(&[u8], &str, Option<BodyEncoding>); 4] = [
            (b"", "", None),
            (b"{\"order\":1}", "{\"order\":1}", None),
            ("é".as_bytes(), "é", None),
            (b"\xff\x00a", "/wBh", Some(BodyEncoding::Base64)),
        ];
        for (bytes, text, encoding) in table {
            assert_eq!(encode_body(bytes.to_vec()), (text.to_owned(), encoding));
            assert_eq!(
                decode_body(text.to_owned(), encoding, "body").unwrap(),
                bytes
            );
        }
    }

    #[test]
    fn base64_text_is_decoded_and_bad_base64_names_the_field() {
        let got = decode_body("aGk=".into(), Some(BodyEncoding::Base64), "body").unwrap();
        assert_eq!(got, b"hi");
        let text = decode_body("aGk=".into(), Some(BodyEncoding::Text), "body").unwrap();
        assert_eq!(text, b"aGk=");
        let err = decode_body(
            "not base64!".into(),
            Some(BodyEncoding::Base64),
            "tasks[2].body",
        )
        .unwrap_err();
        assert_eq!(err.field, "tasks[2].body");
        assert!(err.reason.contains("base64"), "{err}");
    }
}
