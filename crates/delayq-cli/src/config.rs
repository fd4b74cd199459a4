//! From raw flags to validated plans.
//!
//! Following ripgrep's `lowargs` → `hiargs`: [`crate::args`] holds what the user typed, this
//! module checks that it fits together (a topic and an id unless importing, one way to say
//! when, a valid retry count), reads `--body-file` (or decodes `--body-base64`), and produces one plan per command that the
//! rest of the crate takes without checking again.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use delayq_client::{Backoff, BodyEncoding, Client, MaxRetries, NewTask, OnDuplicate, OnExpire};
use serde_json::{Map, Value};

use crate::args::{AddArgs, ClientArgs};
use crate::error::CliError;

/// How to reach the server and how to print.
#[derive(Debug, Clone)]
pub struct Connection {
    /// The client of the server.
    pub client: Client,
    /// Print JSON instead of tables.
    pub json: bool,
}

impl Connection {
    /// Builds the client from `--server` and `--token`.
    pub fn from_args(args: &ClientArgs) -> Result<Connection, CliError> {
        let client = Client::new(&args.server, args.token.clone())?;
        Ok(Connection {
            client,
            json: args.json,
        })
    }
}

/// What `delayq add` does.
#[derive(Debug, Clone)]
pub enum AddPlan {
    /// Add one task.
    One(Box<NewTask>),
    /// Import a JSON-lines file.
    Import(ImportPlan),
}

/// A validated `delayq add --file`.
#[derive(Debug, Clone)]
pub struct ImportPlan {
    /// The file, or `-` for standard input.
    pub path: PathBuf,
    /// Tasks per request.
    pub batch_size: usize,
    /// Fields filled in where a line leaves them out.
    pub defaults: LineDefaults,
}

/// Fields that the flags of `delayq add --file` fill in where a line leaves them out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LineDefaults {
    fields: Map<String, Value>,
}

impl LineDefaults {
    /// Fills in each default field that `task` does not have.
    pub fn apply(&self, task: &mut Map<String, Value>) {
        for (key, value) in &self.fields {
            if !task.contains_key(key) {
                task.insert(key.clone(), value.clone());
            }
        }
    }
}

/// The task options of `delayq add` that a flag gives, checked, whether for one task or as
/// the defaults of an import.
struct TaskOptions {
    max_retries: Option<MaxRetries>,
    backoff: Option<Backoff>,
    on_duplicate: Option<OnDuplicate>,
    on_expire: Option<OnExpire>,
}

impl AddPlan {
    /// Checks the flags of `delayq add` and builds the plan.
    pub fn from_args(args: &AddArgs) -> Result<AddPlan, CliError> {
        let max_retries = args
            .max_retries
            .map(|n| {
                MaxRetries::try_from(n).map_err(|reason| {
                    CliError::usage(format!("invalid --max-retries {n}: {reason}"))
                })
            })
            .transpose()?;
        let options = TaskOptions {
            max_retries,
            backoff: args
                .backoff_schedule
                .as_ref()
                .map(|ms| Backoff::Schedule { ms: ms.clone() }),
            on_duplicate: args.on_duplicate.map(OnDuplicate::from),
            on_expire: args.on_expire.map(OnExpire::from),
        };
        match &args.file {
            Some(path) => Ok(AddPlan::Import(ImportPlan {
                path: path.clone(),
                batch_size: args.batch_size as usize,
                defaults: line_defaults(args, options)?,
            })),
            None => Ok(AddPlan::One(Box::new(one_task(args, options)?))),
        }
    }
}

/// With `--file`: the flags given become the defaults of every line.
fn line_defaults(args: &AddArgs, options: TaskOptions) -> Result<LineDefaults, CliError> {
    let mut fields = Map::new();
    if let Some(topic) = &args.topic {
        fields.insert("topic".into(), Value::from(topic.as_str()));
    }
    if let Some(ttr) = args.ttr {
        fields.insert("ttr_ms".into(), Value::from(ttr));
    }
    if let Some(priority) = args.priority {
        fields.insert("priority".into(), Value::from(priority));
    }
    if let Some(max) = options.max_retries {
        fields.insert("max_retries".into(), Value::from(max.as_i64()));
    }
    if let Some(backoff) = &options.backoff {
        let value = serde_json::to_value(backoff)
            .map_err(|err| CliError::usage(format!("invalid --backoff-schedule: {err}")))?;
        fields.insert("backoff".into(), value);
    }
    if let Some(policy) = options.on_duplicate {
        let value = serde_json::to_value(policy)
            .map_err(|err| CliError::usage(format!("invalid --on-duplicate: {err}")))?;
        fields.insert("on_duplicate".into(), value);
    }
    if let Some(ms) = args.expires_in {
        fields.insert("expires_in_ms".into(), Value::from(ms));
    }
    if let Some(at) = args.expires_at {
        fields.insert("expires_at_ms".into(), Value::from(at));
    }
    if let Some(policy) = options.on_expire {
        fields.insert("on_expire".into(), Value::from(policy.name()));
    }
    if let Some(key) = &args.key {
        fields.insert("key".into(), Value::from(key.as_str()));
    }
    Ok(LineDefaults { fields })
}

/// Without `--file`: the one task of `--topic` and `--id`.
fn one_task(args: &AddArgs, options: TaskOptions) -> Result<NewTask, CliError> {
    let (Some(topic), Some(id)) = (&args.topic, &args.id) else {
        return Err(CliError::usage(
            "delayq add needs --topic and --id (or --file to import tasks)",
        ));
    };
    let body = match (&args.body, &args.body_file, &args.body_base64) {
        (Some(body), _, _) => body.clone().into_bytes(),
        (None, Some(path), _) => read_bytes(path)?,
        (None, None, Some(b64)) => {
            delayq_client::decode_body(b64.clone(), Some(BodyEncoding::Base64), "--body-base64")
                .map_err(|e| CliError::usage(format!("invalid {}: {}", e.field, e.reason)))?
        }
        (None, None, None) => Vec::new(),
    };
    let mut task = NewTask::new(topic.as_str(), id.as_str()).body(body);
    if let Some(priority) = args.priority {
        task = task.priority(priority);
    }
    if let Some(ms) = args.delay.or(args.delay_ms) {
        task = task.delay_ms(ms);
    }
    if let Some(at) = args.at {
        task = task.run_at_ms(at);
    }
    if let Some(ttr) = args.ttr {
        task = task.ttr_ms(ttr);
    }
    if let Some(max) = options.max_retries {
        task = task.max_retries(max);
    }
    if let Some(backoff) = options.backoff {
        task = task.backoff(backoff);
    }
    if let Some(policy) = options.on_duplicate {
        task = task.on_duplicate(policy);
    }
    if let Some(ms) = args.expires_in {
        task = task.expires_in_ms(ms);
    }
    if let Some(at) = args.expires_at {
        task = task.expires_at_ms(at);
    }
    if let Some(policy) = options.on_expire {
        task = task.on_expire(policy);
    }
    if let Some(key) = &args.key {
        task = task.key(key.as_str());
    }
    Ok(task)
}

/// Reads a whole file as bytes, or standard input for `-`: a body may be any bytes.
pub fn read_bytes(path: &Path) -> Result<Vec<u8>, CliError> {
    let read_err = |source| CliError::Read {
        path: path.to_owned(),
        source,
    };
    if path == Path::new("-") {
        let mut bytes = Vec::new();
        std::io::stdin().read_to_end(&mut bytes).map_err(read_err)?;
        Ok(bytes)
    } else {
        std::fs::read(path).map_err(read_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{Cli, Command};
    use clap::Parser as _;
    use delayq_client::When;

    fn plan(argv: &[&str]) -> Result<AddPlan, CliError> {
        let cli = Cli::try_parse_from(argv).expect("flags parse");
        let Command::Add(args) = cli.command else {
            panic!("not add");
        };
        AddPlan::from_args(&args)
    }

    #[test]
    fn one_task() {
        let AddPlan::One(task) = plan(&[
            "delayq",
            "add",
            "-t",
            "orders",
            "-i",
            "o-1",
            "--body",
            "{}",
            "--delay",
            "15m",
            "--ttr",
            "30s",
            "--max-retries",
            "0",
        ])
        .unwrap() else {
            panic!("not one");
        };
        assert_eq!((task.topic.as_str(), task.id.as_str()), ("orders", "o-1"));
        assert_eq!(task.when, When::Delay(900_000));
        assert_eq!(task.ttr_ms, Some(30_000));
        assert_eq!(task.max_retries, Some(MaxRetries::Limited(0)));
    }

    #[test]
    fn expiry_flags() {
        let AddPlan::One(task) = plan(&[
            "delayq",
            "add",
            "-t",
            "orders",
            "-i",
            "o-1",
            "--delay",
            "15m",
            "--expires-in",
            "1h",
            "--on-expire",
            "drop",
        ])
        .unwrap() else {
            panic!("not one");
        };
        assert_eq!(task.expiry, Some(delayq_client::Expiry::In(3_600_000)));
        assert_eq!(task.on_expire, OnExpire::Drop);
        let AddPlan::Import(import) = plan(&[
            "delayq",
            "add",
            "-f",
            "tasks.jsonl",
            "--expires-in",
            "30m",
            "--on-expire",
            "dead",
        ])
        .unwrap() else {
            panic!("not an import");
        };
        let mut line = Map::new();
        import.defaults.apply(&mut line);
        assert_eq!(line["expires_in_ms"], Value::from(1_800_000));
        assert_eq!(line["on_expire"], Value::from("dead"));
        // Both forms of an expiry at once are refused by the flags.
        let both = Cli::try_parse_from([
            "delayq",
            "add",
            "-t",
            "o",
            "-i",
            "1",
            "--expires-in",
            "1h",
            "--expires-at",
            "2030-01-01T00:00:00Z",
        ]);
        assert!(both.is_err());
    }

    #[test]
    fn priority_and_binary_body() {
        let AddPlan::One(task) = plan(&[
            "delayq",
            "add",
            "-t",
            "orders",
            "-i",
            "o-1",
            "--body-base64",
            "/wCA",
            "--priority",
            "7",
        ])
        .unwrap() else {
            panic!("not one");
        };
        assert_eq!(task.body, [0xff, 0x00, 0x80]);
        assert_eq!(task.priority, Some(7));
    }

    #[test]
    fn invalid_combinations() {
        let table: [(&[&str], &str); 3] = [
            (
                &[
                    "delayq",
                    "add",
                    "-t",
                    "a",
                    "-i",
                    "b",
                    "--body-base64",
                    "no!",
                ],
                "invalid --body-base64: is not valid base64",
            ),
            (&["delayq", "add", "-t", "orders"], "needs --topic and --id"),
            (
                &["delayq", "add", "-t", "a", "-i", "b", "--max-retries", "-2"],
                "invalid --max-retries -2",
            ),
        ];
        for (argv, message) in table {
            let err = plan(argv).unwrap_err();
            assert!(err.to_string().contains(message), "{argv:?}: {err}");
            assert_eq!(err.exit_code(), 1);
        }
    }

    #[test]
    fn import_defaults_fill_missing_fields_only() {
        let AddPlan::Import(import) = plan(&[
            "delayq", "add", "--file", "t.jsonl", "-t", "orders", "--ttr", "5s",
        ])
        .unwrap() else {
            panic!("not import");
        };
        let mut line = serde_json::json!({"id": "a", "ttr_ms": 1})
            .as_object()
            .unwrap()
            .clone();
        import.defaults.apply(&mut line);
        assert_eq!(
            Value::Object(line),
            serde_json::json!({"id": "a", "ttr_ms": 1, "topic": "orders"})
        );
        assert_eq!(import.batch_size, 1000);
    }
}
