//! The client commands: each validates its flags, makes its call and prints the answer.
//!
//! With `--json` a command prints the server's `data` as one JSON document, exactly as the
//! server wrote it, so scripts see the API's own shapes. Without it the answer is decoded into
//! the core types and printed for people ([`crate::output`]). Everything printed goes to the
//! `out` writer given to [`run`]; progress and per-line import errors go to standard error.

use std::io::{IsTerminal as _, Write};

use delayq_client::{
    AddOutcome, BodyText, BuryOptions, Call, ListOptions, MaxRetries, Missed, NewTask, PauseData,
    PopOptions, ReleaseData, ReleaseOptions, ScheduleRequest, When, WholeMillis,
};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;

use crate::args::{
    ClientArgs, Command, LimitsCommand, MissedPolicy, PopArgs, PushCommand, PushSetArgs,
    RequeueArgs, RescheduleArgs, ScheduleAddArgs, ScheduleCommand, ScheduleGetArgs, StatsArgs,
    TaskArgs, TasksArgs,
};
use crate::config::{AddPlan, Connection, ImportPlan};
use crate::duration::{format_duration, now_ms};
use crate::error::CliError;
use crate::import::{self, ImportSummary};
use crate::output;

/// Runs a client command (every command but `serve`), printing to `out`.
pub async fn run(command: Command, out: &mut dyn Write) -> Result<(), CliError> {
    match command {
        Command::Serve(_) | Command::Beanstalkd(_) => Err(CliError::usage(
            "`serve` and `beanstalkd` run the server; they are not client commands",
        )),
        Command::Add(args) => {
            let conn = Connection::from_args(&args.client)?;
            match AddPlan::from_args(&args)? {
                AddPlan::One(task) => add_one(&conn, &task, out).await,
                AddPlan::Import(plan) => add_file(&conn, &plan, out).await,
            }
        }
        Command::Pop(args) => pop(&args, out).await,
        command @ (Command::Finish(_)
        | Command::Release(_)
        | Command::Touch(_)
        | Command::Cancel(_)
        | Command::Delete(_)
        | Command::Bury(_)) => settle(command, out).await,
        Command::Requeue(args) => requeue(&args, out).await,
        Command::Reschedule(args) => reschedule(&args, out).await,
        Command::Pause(args) => {
            let call = Call::pause(&args.topic, args.for_ms);
            pause_or_resume(&args.client, &args.topic, &call, out).await
        }
        Command::Resume(args) => {
            let call = Call::resume(&args.topic);
            pause_or_resume(&args.client, &args.topic, &call, out).await
        }
        Command::Get(args) => get(&args, out).await,
        Command::Tasks(args) => tasks(&args, out).await,
        Command::Stats(args) => stats(&args, out).await,
        Command::Topics(args) => {
            let conn = Connection::from_args(&args.client)?;
            if conn.json {
                return print_raw(&conn, &Call::topics(), out).await;
            }
            let rows = conn.client.topics().await?;
            writeln!(out, "{}", output::stats(&rows, now_ms()))?;
            Ok(())
        }
        Command::Push(command) => push(command, out).await,
        Command::Limits(command) => limits(command, out).await,
        Command::Schedule(command) => schedule(command, out).await,
        Command::Bench(args) => crate::bench::run(args, out).await,
        Command::Data(command) => crate::data::run(command, out),
    }
}

/// The commands that change one task and print what they did: finish, release, touch,
/// cancel, delete and bury.
async fn settle(command: Command, out: &mut dyn Write) -> Result<(), CliError> {
    match command {
        Command::Finish(args) => {
            let call = Call::finish(&args.topic, &args.id, args.receipt.as_deref());
            change(&args.client, &call, out, || {
                format!("finished task {:?} of topic {:?}", args.id, args.topic)
            })
            .await
        }
        Command::Release(args) => {
            let mut options = ReleaseOptions::default();
            options.receipt = args.receipt.clone();
            options.delay_ms = args.delay;
            options.error = args.error.clone();
            options.priority = args.priority;
            let call = Call::release(&args.topic, &args.id, &options);
            change(&args.client, &call, out, || {
                format!("released task {:?} of topic {:?}", args.id, args.topic)
            })
            .await
        }
        Command::Touch(args) => {
            let call = Call::touch(&args.topic, &args.id, args.receipt.as_deref());
            change(&args.client, &call, out, || {
                format!(
                    "touched task {:?} of topic {:?}: its time to run restarted",
                    args.id, args.topic
                )
            })
            .await
        }
        Command::Cancel(args) => {
            let call = Call::cancel(&args.topic, &args.id);
            change(&args.client, &call, out, || {
                format!("cancelled task {:?} of topic {:?}", args.id, args.topic)
            })
            .await
        }
        Command::Delete(args) => {
            let call = Call::delete(&args.topic, &args.id);
            change(&args.client, &call, out, || {
                format!("deleted task {:?} of topic {:?}", args.id, args.topic)
            })
            .await
        }
        Command::Bury(args) => {
            let mut options = BuryOptions::default();
            options.receipt = args.receipt.clone();
            options.error = args.error.clone();
            options.priority = args.priority;
            let call = Call::bury(&args.topic, &args.id, &options);
            change(&args.client, &call, out, || {
                format!(
                    "buried task {:?} of topic {:?} (dead until requeued)",
                    args.id, args.topic
                )
            })
            .await
        }
        _ => Err(CliError::usage("not a command that changes one task")),
    }
}

/// `delayq pop`: the delivered tasks as a table, or the raw list with `--json`.
async fn pop(args: &PopArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let conn = Connection::from_args(&args.client)?;
    let mut options = PopOptions::default()
        .count(args.count)
        .auto_finish(args.auto_finish);
    if let Some(timeout) = args.timeout {
        options = options.timeout_ms(timeout);
    }
    if conn.json {
        return print_raw(&conn, &Call::pop(&args.topic, options), out).await;
    }
    let list = conn.client.pop(&args.topic, options).await?;
    writeln!(out, "{}", output::deliveries(&list, now_ms()))?;
    Ok(())
}

/// A command that changes one task's state (finish, release, touch, cancel, delete).
async fn change(
    client: &ClientArgs,
    call: &Call,
    out: &mut dyn Write,
    message: impl FnOnce() -> String,
) -> Result<(), CliError> {
    let conn = Connection::from_args(client)?;
    done(&conn, call, out, message).await
}

/// `delayq get`: one task's whole record.
async fn get(args: &TaskArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let conn = Connection::from_args(&args.client)?;
    if conn.json {
        return print_raw(&conn, &Call::get(&args.topic, &args.id), out).await;
    }
    let task = conn.client.get(&args.topic, &args.id).await?;
    writeln!(out, "{}", output::task(&task, now_ms()))?;
    Ok(())
}

/// `delayq tasks`: one page of a topic's tasks.
async fn tasks(args: &TasksArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let conn = Connection::from_args(&args.client)?;
    let mut options = ListOptions::default()
        .page(args.page)
        .page_size(args.page_size);
    if let Some(state) = args.state {
        options = options.state(state);
    }
    if conn.json {
        return print_raw(&conn, &Call::tasks(&args.topic, &options), out).await;
    }
    let page = conn.client.tasks(&args.topic, &options).await?;
    writeln!(out, "{}", output::tasks(&page, now_ms()))?;
    Ok(())
}

/// `delayq stats`: the counters of one topic, or of every topic.
async fn stats(args: &StatsArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let conn = Connection::from_args(&args.client)?;
    if conn.json {
        return print_raw(&conn, &Call::stats(args.topic.as_deref()), out).await;
    }
    let rows = match &args.topic {
        Some(topic) => vec![(topic.clone(), conn.client.stats(topic).await?)],
        None => conn.client.topics().await?,
    };
    writeln!(out, "{}", output::stats(&rows, now_ms()))?;
    Ok(())
}

/// Sends a call and prints its raw `data` as one JSON document (`null` when there is none).
async fn print_raw(conn: &Connection, call: &Call, out: &mut dyn Write) -> Result<(), CliError> {
    let data = conn.client.send(call).await?.unwrap_or(Value::Null);
    print_json(&data, out)
}

fn print_json(value: &impl serde::Serialize, out: &mut dyn Write) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|err| CliError::Output(std::io::Error::other(err)))?;
    writeln!(out, "{text}")?;
    Ok(())
}

/// Sends a call whose answer carries nothing people need: prints `data` with `--json`, the
/// sentence otherwise.
async fn done(
    conn: &Connection,
    call: &Call,
    out: &mut dyn Write,
    sentence: impl FnOnce() -> String,
) -> Result<(), CliError> {
    let data = conn.client.send(call).await?;
    if conn.json {
        return print_json(&data.unwrap_or(Value::Null), out);
    }
    writeln!(out, "{}", sentence())?;
    Ok(())
}

async fn add_one(conn: &Connection, task: &NewTask, out: &mut dyn Write) -> Result<(), CliError> {
    if conn.json {
        return print_raw(conn, &Call::add(task), out).await;
    }
    let outcome = conn.client.add(task).await?;
    let due = match task.when {
        When::Delay(0) => "ready now".to_owned(),
        when => due_words(when),
    };
    let what = match outcome {
        AddOutcome::Replaced => "replaced",
        AddOutcome::Existed => "kept the existing",
        AddOutcome::Added => "added",
    };
    let due = if outcome == AddOutcome::Existed {
        "unchanged".to_owned()
    } else {
        due
    };
    writeln!(
        out,
        "{what} task {:?} of topic {:?} ({due})",
        task.id, task.topic
    )?;
    Ok(())
}

async fn add_file(
    conn: &Connection,
    plan: &ImportPlan,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let progress = import_progress(plan, conn.json);
    let json = conn.json;
    let result = import::import(&conn.client, plan, &progress, |error| {
        if !json {
            progress.suspend(|| eprintln!("{error}"));
        }
    })
    .await;
    progress.finish_and_clear();
    let (summary, failure) = match result {
        Ok(summary) => (summary, None),
        Err((summary, err)) => (summary, Some(err)),
    };
    print_summary(&summary, json, out)?;
    if let Some(err) = failure {
        return Err(err);
    }
    if summary.failed > 0 {
        return Err(CliError::ImportIncomplete {
            path: plan.path.clone(),
            lines: summary.lines,
            failed: summary.failed,
        });
    }
    Ok(())
}

fn print_summary(summary: &ImportSummary, json: bool, out: &mut dyn Write) -> Result<(), CliError> {
    if json {
        return print_json(summary, out);
    }
    writeln!(out, "{}", summary.sentence())?;
    Ok(())
}

/// A progress bar by bytes of the file, drawn only on a terminal (and never with `--json`).
fn import_progress(plan: &ImportPlan, json: bool) -> ProgressBar {
    let size = std::fs::metadata(&plan.path).map(|m| m.len()).ok();
    let bar = match size {
        Some(size) if size > 0 => ProgressBar::new(size),
        _ => ProgressBar::new_spinner(),
    };
    if json || !std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    } else if let Ok(style) = ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {msg}",
    ) {
        bar.set_style(style);
    }
    bar
}

async fn requeue(args: &RequeueArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let conn = Connection::from_args(&args.client)?;
    match &args.id {
        Some(id) => {
            let call = Call::requeue(&args.topic, id);
            done(&conn, &call, out, || {
                format!("requeued task {id:?} of topic {:?}", args.topic)
            })
            .await
        }
        None => {
            if conn.json {
                return print_raw(&conn, &Call::requeue_all(&args.topic), out).await;
            }
            let count = conn.client.requeue_all(&args.topic).await?;
            writeln!(out, "requeued {count} dead tasks of topic {:?}", args.topic)?;
            Ok(())
        }
    }
}

/// `delayq reschedule`: a new due for a DELAYED or READY task; now when no time is given.
async fn reschedule(args: &RescheduleArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let conn = Connection::from_args(&args.client)?;
    let when = match (args.delay.or(args.delay_ms), args.at) {
        (Some(ms), _) => When::Delay(ms),
        (None, Some(at)) => When::At(at),
        (None, None) => When::Delay(0),
    };
    let call = Call::reschedule(&args.topic, &args.id, when);
    let data = conn.client.send(&call).await?.unwrap_or(Value::Null);
    if conn.json {
        return print_json(&data, out);
    }
    let state = serde_json::from_value::<ReleaseData>(data)
        .map(|d| d.state.name())
        .unwrap_or("rescheduled");
    let due = due_words(when);
    writeln!(
        out,
        "rescheduled task {:?} of topic {:?}: {state}, {due}",
        args.id, args.topic
    )?;
    Ok(())
}

/// `delayq pause` and `delayq resume`: says how the topic's pause stands afterwards.
async fn pause_or_resume(
    client: &ClientArgs,
    topic: &str,
    call: &Call,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let conn = Connection::from_args(client)?;
    let data = conn.client.send(call).await?.unwrap_or(Value::Null);
    if conn.json {
        return print_json(&data, out);
    }
    let pause: PauseData =
        serde_json::from_value(data).map_err(|err| CliError::Output(std::io::Error::other(err)))?;
    writeln!(
        out,
        "topic {topic:?} {}",
        output::pause_words(&pause, now_ms())
    )?;
    Ok(())
}

/// A due in words: `due now`, `due in 15m`, `due 2030-01-01T08:00:00.000Z (in 2d)`.
fn due_words(when: When) -> String {
    match when {
        When::Delay(0) => "due now".to_owned(),
        When::Delay(ms) => format!("due in {}", format_duration(ms)),
        When::At(at) => format!("due {}", output::when(at, now_ms())),
    }
}

/// `delayq limits set|get|delete`.
async fn limits(command: LimitsCommand, out: &mut dyn Write) -> Result<(), CliError> {
    match command {
        LimitsCommand::Set(args) => {
            let conn = Connection::from_args(&args.client)?;
            let mut limits = delayq_client::FlowLimits::default();
            limits.max_active = args.max_active;
            limits.rate_per_s = args.rate;
            limits.burst = args.burst;
            limits.max_active_per_key = args.max_active_per_key;
            if limits.is_empty() {
                return Err(CliError::usage(
                    "delayq limits set needs at least one of --max-active, --rate, \
                     --max-active-per-key (delayq limits delete removes a topic's limits)",
                ));
            }
            let call = Call::limits_set(&args.topic, &limits);
            if conn.json {
                return print_raw(&conn, &call, out).await;
            }
            let view = conn.client.limits_set(&args.topic, &limits).await?;
            writeln!(out, "{}", output::limits(&[view]))?;
            Ok(())
        }
        LimitsCommand::Get(args) => {
            let conn = Connection::from_args(&args.client)?;
            if conn.json {
                return print_raw(&conn, &Call::limits_get(args.topic.as_deref()), out).await;
            }
            let limits = conn.client.limits_get(args.topic.as_deref()).await?;
            writeln!(out, "{}", output::limits(&limits))?;
            Ok(())
        }
        LimitsCommand::Delete(args) => {
            let conn = Connection::from_args(&args.client)?;
            let call = Call::limits_delete(&args.topic);
            if conn.json {
                return print_raw(&conn, &call, out).await;
            }
            let deleted = conn.client.limits_delete(&args.topic).await?;
            let words = if deleted {
                "no longer has flow limits"
            } else {
                "had no flow limits"
            };
            writeln!(out, "topic {:?} {words}", args.topic)?;
            Ok(())
        }
    }
}

/// `delayq push set|get|delete`.
async fn push(command: PushCommand, out: &mut dyn Write) -> Result<(), CliError> {
    match command {
        PushCommand::Set(args) => {
            let conn = Connection::from_args(&args.client)?;
            let call = Call::push_set(&push_target(&args)?);
            if conn.json {
                return print_raw(&conn, &call, out).await;
            }
            conn.client.send(&call).await?;
            writeln!(
                out,
                "topic {:?} is now delivered to {} by the server",
                args.topic, args.url
            )?;
            Ok(())
        }
        PushCommand::Get(args) => {
            let conn = Connection::from_args(&args.client)?;
            if conn.json {
                return print_raw(&conn, &Call::push_get(args.topic.as_deref()), out).await;
            }
            let targets = conn.client.push_get(args.topic.as_deref()).await?;
            writeln!(out, "{}", output::push_targets(&targets))?;
            Ok(())
        }
        PushCommand::Delete(args) => {
            let conn = Connection::from_args(&args.client)?;
            let call = Call::push_delete(&args.topic);
            if conn.json {
                return print_raw(&conn, &call, out).await;
            }
            let deleted = conn.client.push_delete(&args.topic).await?;
            let words = if deleted {
                "no longer has a push target: its tasks wait for consumers"
            } else {
                "had no push target"
            };
            writeln!(out, "topic {:?} {words}", args.topic)?;
            Ok(())
        }
    }
}

/// The target of `delayq push set`; the server checks it again and names a bad field.
fn push_target(args: &PushSetArgs) -> Result<delayq_client::PushTarget, CliError> {
    let mut target = delayq_client::PushTarget::new(&args.topic, &args.url);
    target.timeout_ms = args.timeout;
    if let Some(n) = args.concurrency {
        target.concurrency = n;
    }
    target.rate_per_s = args.rate;
    target.burst = args.burst;
    for header in &args.headers {
        let Some((name, value)) = header.split_once(':') else {
            return Err(CliError::usage(format!(
                "--header {header:?}: write it as `Name: value`"
            )));
        };
        target
            .headers
            .insert(name.trim().to_owned(), value.trim().to_owned());
    }
    target.secret = args.secret.clone();
    Ok(target)
}

/// `delayq schedule ...`.
async fn schedule(command: ScheduleCommand, out: &mut dyn Write) -> Result<(), CliError> {
    match command {
        ScheduleCommand::Add(args) => schedule_add(&args, out).await,
        ScheduleCommand::List(args) => {
            let conn = Connection::from_args(&args.client)?;
            let call = Call::schedules(args.topic.as_deref());
            if conn.json {
                return print_raw(&conn, &call, out).await;
            }
            let list = conn.client.schedules(args.topic.as_deref()).await?;
            writeln!(out, "{}", output::schedules(&list.schedules, now_ms()))?;
            Ok(())
        }
        ScheduleCommand::Get(args) => schedule_get(&args, out).await,
        ScheduleCommand::Delete(args) => {
            let call = Call::delete_schedule(&args.topic, &args.name);
            change(&args.client, &call, out, || {
                format!(
                    "deleted schedule {:?} of topic {:?}; its pending occurrence is cancelled",
                    args.name, args.topic
                )
            })
            .await
        }
        ScheduleCommand::Pause(args) => {
            let call = Call::pause_schedule(&args.topic, &args.name);
            change(&args.client, &call, out, || {
                format!(
                    "paused schedule {:?} of topic {:?}; no occurrence until it is resumed",
                    args.name, args.topic
                )
            })
            .await
        }
        ScheduleCommand::Resume(args) => {
            let call = Call::resume_schedule(&args.topic, &args.name);
            change(&args.client, &call, out, || {
                format!(
                    "resumed schedule {:?} of topic {:?} from the next occurrence",
                    args.name, args.topic
                )
            })
            .await
        }
    }
}

/// `delayq schedule add`: the schedule as it now stands, with its next `--next` occurrences.
async fn schedule_add(args: &ScheduleAddArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let conn = Connection::from_args(&args.client)?;
    let put = conn.client.put_schedule(&schedule_request(args)?).await?;
    // The answer shows 10 occurrences; --next asks for another number.
    let view = if args.next == put.schedule.next_ms.len() as u64 {
        put.schedule
    } else {
        conn.client
            .schedule(&args.topic, &args.name, Some(args.next))
            .await?
    };
    if conn.json {
        return print_json(&view, out);
    }
    writeln!(
        out,
        "schedule {:?} of topic {:?} {}",
        args.name, args.topic, put.outcome
    )?;
    writeln!(out, "{}", output::schedule(&view, now_ms()))?;
    Ok(())
}

/// `delayq schedule get`.
async fn schedule_get(args: &ScheduleGetArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let conn = Connection::from_args(&args.client)?;
    let call = Call::schedule(&args.topic, &args.name, Some(args.next));
    if conn.json {
        return print_raw(&conn, &call, out).await;
    }
    let view = conn
        .client
        .schedule(&args.topic, &args.name, Some(args.next))
        .await?;
    writeln!(out, "{}", output::schedule(&view, now_ms()))?;
    Ok(())
}

/// The `POST /schedules` body of `delayq schedule add`; the server checks the values.
fn schedule_request(args: &ScheduleAddArgs) -> Result<ScheduleRequest, CliError> {
    let max_retries = args
        .max_retries
        .map(MaxRetries::try_from)
        .transpose()
        .map_err(|reason| CliError::usage(format!("--max-retries {reason}")))?;
    Ok(ScheduleRequest {
        topic: args.topic.clone(),
        name: args.name.clone(),
        cron: args.cron.clone(),
        every_ms: args.every.or(args.every_ms).map(WholeMillis),
        timezone: args.timezone.clone(),
        body: args.body.clone().map(BodyText),
        priority: args.priority,
        ttr_ms: args.ttr.map(WholeMillis),
        max_retries,
        start_ms: args.start.map(WholeMillis),
        end_ms: args.end.map(WholeMillis),
        paused: args.paused.then_some(true),
        missed: args.missed.map(|m| match m {
            MissedPolicy::FireOnce => Missed::FireOnce,
            MissedPolicy::Skip => Missed::Skip,
        }),
        ..ScheduleRequest::default()
    })
}
