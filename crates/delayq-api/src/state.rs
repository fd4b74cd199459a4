//! How a task's state is written on the wire.
//!
//! seqdelay writes a state as its numeric code in `GET /get` (`"state": 0`) and as its name in
//! `GET /tasks` (`"state": "delayed"`); delayq keeps both and adds the other form beside each
//! (`state_name`, `state_code`). The modules [`code`] and [`name`] are serde `with` adapters
//! for a [`State`] field; both read either form, so a reader never depends on which endpoint
//! wrote the value.

use delayq_core::State;
use serde::{Deserialize, Deserializer, Serializer};

/// Reads a state written as its code (`1`) or its name (`"ready"`).
fn code_or_name<'de, D: Deserializer<'de>>(d: D) -> Result<State, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Code(u8),
        Name(String),
    }
    match Raw::deserialize(d)? {
        Raw::Code(code) => State::from_code(code)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown state code {code}"))),
        Raw::Name(name) => State::parse(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown state {name:?}"))),
    }
}

/// A [`State`] written as its numeric code (`0` delayed … `5` dead).
pub mod code {
    use super::*;

    /// Writes the code.
    pub fn serialize<S: Serializer>(state: &State, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u8(state.code())
    }

    /// Reads a code or a name.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<State, D::Error> {
        code_or_name(d)
    }
}

/// A [`State`] written as its lower-case name (`delayed` … `dead`).
pub mod name {
    use super::*;

    /// Writes the name.
    pub fn serialize<S: Serializer>(state: &State, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(state.name())
    }

    /// Reads a name or a code.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<State, D::Error> {
        code_or_name(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    struct Both {
        #[serde(with = "code")]
        c: State,
        #[serde(with = "name")]
        n: State,
    }

    #[test]
    fn code_and_name_write_their_form_and_read_either() {
        let both = Both {
            c: State::Dead,
            n: State::Ready,
        };
        assert_eq!(
            serde_json::to_string(&both).unwrap(),
            r#"{"c":5,"n":"ready"}"#
        );
        let read: Both = serde_json::from_str(r#"{"c":"dead","n":1}"#).unwrap();
        assert_eq!(read, both);
        let err = serde_json::from_str::<Both>(r#"{"c":9,"n":1}"#).unwrap_err();
        assert!(err.to_string().contains("unknown state code 9"), "{err}");
    }
}
