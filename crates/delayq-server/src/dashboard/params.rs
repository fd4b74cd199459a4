//! Query strings and form bodies of the dashboard, read by hand so that a bad value renders
//! as a page naming the field (an [`AppError`]) rather than a bare extractor rejection.

use serde::de::DeserializeOwned;

use crate::error::AppError;
use crate::extract::parse_query;

/// The decoded `name=value` pairs of a query string or an urlencoded form.
#[derive(Debug, Clone, Default)]
pub(super) struct Params(Vec<(String, String)>);

impl Params {
    /// Decodes `text` (`a=1&b=x%20y`).
    pub fn parse(text: &str) -> Params {
        Params(
            form_urlencoded::parse(text.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    /// The value of `name`, when given and not empty (an empty form field means "not given").
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }

    /// The value of `name`, or a 400 naming it.
    pub fn required(&self, name: &str) -> Result<&str, AppError> {
        self.get(name).ok_or_else(|| AppError::Missing {
            field: name.to_owned(),
        })
    }

    /// A whole number from `min` to `max`, `default` when not given.
    pub fn number(&self, name: &str, default: u64, min: u64, max: u64) -> Result<u64, AppError> {
        let Some(text) = self.get(name) else {
            return Ok(default);
        };
        match text.trim().parse::<u64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(AppError::invalid(
                name,
                format!("is {text:?}; expected a whole number from {min} to {max}"),
            )),
        }
    }

    /// Every pair, in order.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.0
    }

    /// The pairs as the API request `T`: empty fields are left out (not given), others are
    /// read as the API reads a query string, a bad value a 400 naming its field.
    pub fn request<T: DeserializeOwned>(&self) -> Result<T, AppError> {
        let given: Vec<(&str, &str)> = self
            .0
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        parse_query(&query(&given))
    }
}

/// Encodes pairs as a query string.
pub(super) fn query(pairs: &[(&str, &str)]) -> String {
    let mut out = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        out.append_pair(k, v);
    }
    out.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_numbers_and_their_errors() {
        let p = Params::parse("topic=a%20b&page=3&empty=&bad=x&big=99");
        assert_eq!(p.get("topic"), Some("a b"));
        assert_eq!(p.get("empty"), None);
        assert_eq!(p.number("page", 1, 1, 10).unwrap(), 3);
        assert_eq!(p.number("missing", 7, 1, 10).unwrap(), 7);
        for field in ["bad", "big"] {
            let err = p.number(field, 1, 1, 10).unwrap_err();
            assert_eq!(err.status(), 400);
            assert!(err.to_string().contains(field), "{err}");
        }
        assert_eq!(p.required("nope").unwrap_err().status(), 400);
        assert_eq!(
            query(&[("id", "a/b c"), ("topic", "t")]),
            "id=a%2Fb+c&topic=t"
        );
    }
}
