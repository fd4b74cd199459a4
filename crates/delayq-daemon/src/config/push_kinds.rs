//! The kinds of the push settings (docs/push.md): `push_allow` (networks and hosts) and the
//! push targets created at start (`[[push]]` tables in the file, a JSON array as a flag or
//! variable). Each is checked by `delayq-push`'s own rules, so a target refused here is
//! the one `POST /push` refuses, with the same field named.

use delayq_push::{AllowList, PushTarget};

use super::kinds::{Kind, Rejected, show_toml};

/// `push_allow`: networks (CIDR), addresses and host names (`*.domain` for every name under
/// it), comma-separated (or a TOML array of strings). Empty: anywhere.
pub(crate) struct PushAllow;

impl Kind for PushAllow {
    type Value = Vec<String>;

    fn accepts(&self) -> String {
        "a comma-separated list of networks (10.0.0.0/8), addresses and host names (hooks.example.com, *.example.com)".into()
    }

    fn value_name(&self) -> String {
        "NETS,HOSTS".into()
    }

    fn read_text(&self, text: &str) -> Result<Vec<String>, Rejected> {
        let entries: Vec<String> = text
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(str::to_owned)
            .collect();
        AllowList::parse(&entries).map_err(|reason| Rejected {
            at: String::new(),
            value: format!("{text:?}"),
            expected: format!("{} ({reason})", self.accepts()),
        })?;
        Ok(entries)
    }

    fn read_toml(&self, value: &toml::Value) -> Result<Vec<String>, Rejected> {
        match value {
            toml::Value::String(text) => self.read_text(text),
            toml::Value::Array(items) => {
                let mut texts = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    let Some(text) = item.as_str() else {
                        return Err(Rejected {
                            at: format!("[{i}]"),
                            value: show_toml(item),
                            expected: "a string".into(),
                        });
                    };
                    texts.push(text);
                }
                self.read_text(&texts.join(","))
            }
            other => Err(Rejected {
                at: String::new(),
                value: show_toml(other),
                expected: "an array of strings".into(),
            }),
        }
    }

    fn show(&self, value: &Vec<String>) -> String {
        if value.is_empty() {
            "anywhere".into()
        } else {
            value.join(",")
        }
    }
}

/// The push targets to create or update at start.
pub(crate) struct PushTargets;

impl PushTargets {
    fn one(value: serde_json::Value, at: String) -> Result<PushTarget, Rejected> {
        let shown = value.to_string();
        let target: PushTarget = serde_json::from_value(value).map_err(|e| Rejected {
            at: at.clone(),
            value: "(a target)".into(),
            expected: format!("a push target: {e}"),
        })?;
        delayq_push::target::validate(&target).map_err(|e| Rejected {
            at: format!("{at}.{}", e.field),
            // The whole target may hold its secret: never echo it.
            value: if target.secret.is_some() {
                "(a target with a secret)".into()
            } else {
                shown
            },
            expected: e.reason,
        })?;
        Ok(target)
    }
}

impl Kind for PushTargets {
    type Value = Vec<PushTarget>;

    fn accepts(&self) -> String {
        "push targets: {topic, url, timeout_ms?, concurrency?, rate_per_s?, burst?, headers?, secret?} (docs/push.md)".into()
    }

    fn value_name(&self) -> String {
        "JSON".into()
    }

    fn read_text(&self, text: &str) -> Result<Vec<PushTarget>, Rejected> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| Rejected {
            at: String::new(),
            value: "(text)".into(),
            expected: format!("a JSON array of push targets: {e}"),
        })?;
        let serde_json::Value::Array(items) = value else {
            return Err(Rejected {
                at: String::new(),
                value: "(text)".into(),
                expected: "a JSON array of push targets".into(),
            });
        };
        items
            .into_iter()
            .enumerate()
            .map(|(i, item)| PushTargets::one(item, format!("[{i}]")))
            .collect()
    }

    fn read_toml(&self, value: &toml::Value) -> Result<Vec<PushTarget>, Rejected> {
        let Some(tables) = value.as_array() else {
            return Err(Rejected {
                at: String::new(),
                value: show_toml(value),
                expected: "[[push]] tables".into(),
            });
        };
        tables
            .iter()
            .enumerate()
            .map(|(i, table)| {
                let json = serde_json::to_value(table).map_err(|e| Rejected {
                    at: format!("[{i}]"),
                    value: show_toml(table),
                    expected: e.to_string(),
                })?;
                PushTargets::one(json, format!("[{i}]"))
            })
            .collect()
    }

    fn show(&self, _: &Vec<PushTarget>) -> String {
        String::new()
    }

    fn secret(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_lists_are_checked() {
        assert_eq!(
            PushAllow
                .read_text("10.0.0.0/8, hooks.example.com")
                .unwrap(),
            ["10.0.0.0/8", "hooks.example.com"]
        );
        assert!(PushAllow.read_text("").unwrap().is_empty());
        let err = PushAllow.read_text("10.0.0.0/99").unwrap_err();
        assert!(err.expected.contains("10.0.0.0/99"), "{}", err.expected);
        let toml: toml::Value = toml::from_str("a = [\"127.0.0.1\", 3]").unwrap();
        assert_eq!(PushAllow.read_toml(&toml["a"]).unwrap_err().at, "[1]");
    }

    #[test]
    fn targets_are_read_and_checked_like_post_push() {
        let file: toml::Value = toml::from_str(
            r#"
            [[push]]
            topic = "orders"
            url = "https://hooks.example.com/orders"
            concurrency = 8
            headers = { "X-Env" = "prod" }

            [[push]]
            topic = "pay"
            url = "http://127.0.0.1:9/cb"
            rate_per_s = 2.5
            "#,
        )
        .unwrap();
        let targets = PushTargets.read_toml(&file["push"]).unwrap();
        assert_eq!(targets.len(), 2);
        assert_eq!(targets[0].concurrency, 8);
        assert_eq!(targets[1].rate_per_s, Some(2.5));

        let bad: toml::Value =
            toml::from_str("[[push]]\ntopic = \"t\"\nurl = \"ftp://x/\"\nsecret = \"s\"").unwrap();
        let err = PushTargets.read_toml(&bad["push"]).unwrap_err();
        assert_eq!(err.at, "[0].url");
        assert!(!err.value.contains("\"s\""), "the secret is never shown");

        let flag = PushTargets
            .read_text(r#"[{"topic":"a","url":"http://h/","headers":{"Delayq-Id":"x"}}]"#)
            .unwrap_err();
        assert_eq!(flag.at, "[0].headers.Delayq-Id");
        assert!(PushTargets.read_text("{}").is_err());
    }
}
