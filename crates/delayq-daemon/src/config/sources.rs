//! Where settings come from: the flags and environment variables (through clap) and the TOML
//! file, and the one rule that picks between them.
//!
//! [`ServeArgs`] keeps the raw text of each flag or variable; clap already puts a flag before
//! its variable. [`ConfigFile`] is the parsed `--config` file, checked for unknown keys.
//! [`Sources::pick`] then takes a setting's value from the first source that has it and reads
//! it with the setting's kind, so every refusal names the source the same way.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use clap::{Arg, ArgAction, ArgMatches, Command};

use super::ConfigError;
use super::kinds::{Kind, Rejected, show_toml};
use super::settings::{Meta, reference};

/// A setting's names in each source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Names {
    /// The field of [`super::settings::Settings`], also clap's id.
    pub field: &'static str,
    /// The long flag, without `--`.
    pub flag: &'static str,
    /// The environment variable.
    pub env: &'static str,
    /// The dotted TOML key.
    pub key: &'static str,
}

impl Names {
    /// The names of one setting.
    pub const fn new(
        field: &'static str,
        flag: &'static str,
        env: &'static str,
        key: &'static str,
    ) -> Names {
        Names {
            field,
            flag,
            env,
            key,
        }
    }
}

/// The flags of `delayq serve`, as given. Each one can also be given as an environment
/// variable; the flag wins over the variable, the variable over the `--config` file, the file
/// over the default. Nothing is checked here: [`super::ServerConfig::from_args`] does that,
/// so that every error names the flag and the accepted range the same way.
///
/// The flags are built from the settings table, so `delayq serve --help` lists every setting
/// with its variable and its default.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct ServeArgs {
    /// A TOML file with any of the settings.
    pub config: Option<PathBuf>,
    /// The text of each setting given as a flag or variable, by field name.
    values: BTreeMap<&'static str, Vec<String>>,
}

impl fmt::Debug for ServeArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Names only: values may be secrets (tokens).
        f.debug_struct("ServeArgs")
            .field("config", &self.config)
            .field("given", &self.values.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The id and flag of `--config`, the one flag that is a source and not a setting.
const CONFIG: &str = "config";

impl Meta {
    /// The clap argument of this setting.
    fn arg(&self) -> Arg {
        let default = if self.default.is_empty() {
            String::new()
        } else {
            format!(" [default: {}]", self.default)
        };
        let help = format!("{}{default}", self.doc);
        let long_help = format!("{}\nAccepts {}.{default}", self.doc, self.accepts);
        let arg = Arg::new(self.names.field)
            .long(self.names.flag)
            .env(self.names.env)
            .value_name(self.value_name.clone())
            .help(help)
            .long_help(long_help)
            .value_parser(clap::value_parser!(String))
            .hide_env_values(self.secret);
        if self.repeated {
            arg.action(ArgAction::Append).value_delimiter(' ')
        } else if self.switch {
            // `--no-dashboard` alone means true; a value needs `=` so that the flag never
            // takes the next argument as its value.
            arg.action(ArgAction::Set)
                .num_args(0..=1)
                .require_equals(true)
                .default_missing_value("true")
        } else {
            arg.action(ArgAction::Set)
        }
    }
}

impl clap::Args for ServeArgs {
    fn augment_args(cmd: Command) -> Command {
        let config = Arg::new(CONFIG)
            .long(CONFIG)
            .env("DELAYQ_CONFIG")
            .value_name("FILE")
            .value_parser(clap::value_parser!(PathBuf))
            .help("A TOML file with any of these settings (flags and environment win over it)");
        cmd.arg(config)
            .args(reference().iter().map(Meta::arg))
            .after_help(
                "Each setting is also a key of the --config file; see docs/operations.md. \
                 A flag wins over its variable, the variable over the file.",
            )
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

impl clap::FromArgMatches for ServeArgs {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut args = ServeArgs::default();
        args.update_from_arg_matches(matches)?;
        Ok(args)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        if let Some(path) = matches.get_one::<PathBuf>(CONFIG) {
            self.config = Some(path.clone());
        }
        for meta in reference() {
            if let Some(values) = matches.get_many::<String>(meta.names.field) {
                self.values
                    .insert(meta.names.field, values.cloned().collect());
            }
        }
        Ok(())
    }
}

/// A parsed `--config` file.
#[derive(Debug, Clone)]
pub(crate) struct ConfigFile {
    path: PathBuf,
    table: toml::Table,
}

impl ConfigFile {
    /// Reads and parses the file at `path`.
    pub fn read(path: &Path) -> Result<ConfigFile, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::ReadFile {
            path: path.to_owned(),
            source,
        })?;
        ConfigFile::parse(&text, path)
    }

    /// Parses `text`; a syntax error or a key that is no setting is an error naming `path`.
    pub fn parse(text: &str, path: &Path) -> Result<ConfigFile, ConfigError> {
        let table: toml::Table = toml::from_str(text).map_err(|e| ConfigError::ParseFile {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        let keys: Vec<&str> = reference().iter().map(|m| m.names.key).collect();
        check_keys(&table, "", &keys).map_err(|message| ConfigError::ParseFile {
            path: path.to_owned(),
            message,
        })?;
        Ok(ConfigFile {
            path: path.to_owned(),
            table,
        })
    }

    /// The value at a dotted key.
    fn get(&self, key: &str) -> Option<&toml::Value> {
        let (tables, leaf) = match key.rsplit_once('.') {
            Some((tables, leaf)) => (Some(tables), leaf),
            None => (None, key),
        };
        let mut table = &self.table;
        for part in tables.into_iter().flat_map(|t| t.split('.')) {
            table = table.get(part)?.as_table()?;
        }
        table.get(leaf)
    }
}

/// Refuses every key of `table` (under `prefix`) that is not a setting's key or a table of
/// them, so that a typo is caught instead of silently ignored.
fn check_keys(table: &toml::Table, prefix: &str, known: &[&str]) -> Result<(), String> {
    for (name, value) in table {
        let key = format!("{prefix}{name}");
        if known.contains(&key.as_str()) {
            continue;
        }
        let below = format!("{key}.");
        if !known.iter().any(|k| k.starts_with(&below)) {
            return Err(format!(
                "unknown key {key} (the keys are {})",
                known.join(", ")
            ));
        }
        let Some(inner) = value.as_table() else {
            return Err(format!(
                "{key}: expected a table, found {}",
                show_toml(value)
            ));
        };
        check_keys(inner, &below, known)?;
    }
    Ok(())
}

/// The sources of one `delayq serve`: its flags and variables, and its file if any.
pub(crate) struct Sources<'a> {
    /// The flags and environment.
    pub args: &'a ServeArgs,
    /// The `--config` file.
    pub file: Option<&'a ConfigFile>,
}

impl Sources<'_> {
    /// Takes a setting's value from the first source that has it (flag or variable, then
    /// the file) and reads it with `kind`. Returns the value and the name of its source, or
    /// `None` if no source has it.
    pub fn pick<K: Kind>(
        &self,
        names: &Names,
        kind: &K,
    ) -> Result<Option<(K::Value, String)>, ConfigError> {
        if let Some(texts) = self.args.values.get(names.field) {
            let setting = format!("--{} (env {})", names.flag, names.env);
            return match kind.read_texts(texts) {
                Ok(value) => Ok(Some((value, setting))),
                Err(rejected) => Err(invalid(setting, rejected)),
            };
        }
        let Some(file) = self.file else {
            return Ok(None);
        };
        let Some(value) = file.get(names.key) else {
            return Ok(None);
        };
        let path = file.path.display();
        match kind.read_toml(value) {
            Ok(value) => Ok(Some((value, format!("{} in {path}", names.key)))),
            Err(r) => Err(invalid(format!("{}{} in {path}", names.key, r.at), r)),
        }
    }
}

fn invalid(setting: String, rejected: Rejected) -> ConfigError {
    ConfigError::Invalid {
        setting,
        value: rejected.value,
        expected: rejected.expected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ConfigFile, ConfigError> {
        ConfigFile::parse(text, Path::new("delayq.toml"))
    }

    #[test]
    fn file_syntax_and_unknown_keys_are_named() {
        let table = [
            ("[limits]\nmax_bach = 5", "unknown key limits.max_bach"),
            ("lisen = \"x\"", "unknown key lisen"),
            ("limits = 5", "limits: expected a table"),
            ("listen = ", "line 1"),
        ];
        for (text, want) in table {
            let msg = parse(text).unwrap_err().to_string();
            assert!(msg.contains(want), "{text:?}: {msg}");
            assert!(msg.contains("delayq.toml"), "{msg}");
        }
        let file = parse("[limits]\nmax_batch = 5\n[defaults]\nttr_ms = 1").unwrap();
        assert_eq!(file.get("limits.max_batch"), Some(&toml::Value::Integer(5)));
        assert_eq!(file.get("defaults.ttr_ms"), Some(&toml::Value::Integer(1)));
        assert_eq!(file.get("listen"), None);
    }
}
