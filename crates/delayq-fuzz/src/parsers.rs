//! The targets over parsers of bytes in memory: JSON request bodies, beanstalk command
//! lines, log records.

use delayq_api::{
    AckRequest, AddBatchRequest, AddRequest, AddTaskRequest, FinishBatchRequest, FinishRequest,
    PopRequest, ReleaseRequest, RequeueRequest, TaskKey,
};
use delayq_beanstalk::proto::{
    Command, DEFAULT_MAX_JOB_SIZE, LINE_MAX, LineEvent, LineReader, ParseError,
};
use delayq_server::error::AppError;
use delayq_server::extract::parse_json;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The instant the `api_request` target validates tasks at.
const NOW_MS: u64 = 1_800_000_000_000;

/// A request body, read by the server's JSON reader ([`parse_json`]) as every request type,
/// with `/add` and `/finish` told apart as their handlers do. Checks:
///
/// - a refusal is a client error (400 or 413), never a server error;
/// - a request that is read can be written back by its type (what the client library does)
///   and read again;
/// - a task that is read goes through the library's validation without panicking, and an
///   invalid one names its field.
pub fn api_request(data: &[u8]) {
    if AddRequest::is_batch(data) {
        if let Some(batch) = read::<AddBatchRequest>(data) {
            for task in batch.tasks {
                validate(task);
            }
        }
    } else if let Some(task) = read::<AddTaskRequest>(data) {
        validate(task);
    }
    if FinishRequest::is_batch(data) {
        read::<FinishBatchRequest>(data);
    } else {
        read::<AckRequest>(data);
    }
    read::<PopRequest>(data);
    read::<ReleaseRequest>(data);
    read::<RequeueRequest>(data);
    read::<TaskKey>(data);
}

/// Reads `data` as a `T`; checks the refusal or the round trip.
fn read<T: DeserializeOwned + Serialize>(data: &[u8]) -> Option<T> {
    match parse_json::<T>(data) {
        Ok(value) => {
            let written = serde_json::to_vec(&value).expect("a request serializes");
            if let Err(e) = parse_json::<T>(&written) {
                panic!(
                    "{} written back as {} is refused: {e}",
                    std::any::type_name::<T>(),
                    String::from_utf8_lossy(&written)
                );
            }
            Some(value)
        }
        Err(e) => {
            assert_client_error(&e);
            None
        }
    }
}

fn assert_client_error(e: &AppError) {
    let status = e.status().as_u16();
    assert!(
        status == 400 || status == 413,
        "a request body was refused with {status}: {e}"
    );
    assert!(!e.public_message().is_empty(), "an empty error message");
}

/// Validates a task as `Queue::add` does.
fn validate(task: AddTaskRequest) {
    let limits = delayq::core::Limits::default();
    let defaults = delayq::core::TaskDefaults::default();
    let checked = task
        .into_new_task()
        .and_then(|t| delayq::core::validate::validate_task(t, &limits, &defaults, NOW_MS));
    match checked {
        Ok(_) => {}
        Err(e) => assert!(!e.field.is_empty(), "a refusal that names no field: {e}"),
    }
}

/// Bytes a beanstalk client sends, cut into reads of the size the first byte gives (1 to
/// 255), fed to the server's line reader; every line is parsed as a command and a `put`'s
/// body is taken from the reader as the connection does. Checks that a line is never longer
/// than beanstalkd's limit and that a `put` accepted never announces more than the job size
/// limit.
pub fn beanstalk_command(data: &[u8]) {
    let Some((&read_size, bytes)) = data.split_first() else {
        return;
    };
    let mut reader = LineReader::new();
    for piece in bytes.chunks(usize::from(read_size).max(1)) {
        reader.feed(piece);
        while let Some(event) = reader.next_event() {
            let LineEvent::Line(line) = event else {
                continue;
            };
            assert!(line.len() + 2 <= LINE_MAX, "a line of {} bytes", line.len());
            match Command::parse(&line, DEFAULT_MAX_JOB_SIZE) {
                Ok(Command::Put { bytes, .. }) => {
                    assert!(bytes <= DEFAULT_MAX_JOB_SIZE, "a put of {bytes} bytes");
                    reader.take(bytes as usize + 2);
                }
                Err(ParseError::JobTooBig { skip }) => {
                    assert!(skip > u64::from(DEFAULT_MAX_JOB_SIZE), "skip {skip}");
                    reader.take(usize::try_from(skip).unwrap_or(usize::MAX));
                }
                Ok(_) | Err(ParseError::BadFormat | ParseError::UnknownCommand) => {}
            }
        }
    }
}

/// One record of the embedded backend's log or snapshot, decoded; a record that decodes
/// must encode back to the same change (see
/// [`record_round_trip`](delayq::storage::embedded::fuzzing::record_round_trip)).
pub fn record_codec(data: &[u8]) {
    if let Err(why) = delayq::storage::embedded::fuzzing::record_round_trip(data) {
        assert!(why.starts_with("cannot decode "), "{why}");
    }
}
