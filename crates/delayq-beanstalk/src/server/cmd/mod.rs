//! The commands, one file per group, each a method of [`super::session::Session`] that
//! answers a [`crate::proto::Reply`]; [`super::session::Session::apply`] dispatches to them.
//! The `stats*` documents are in [`super::stats`].

mod jobs;
mod kick;
mod pause;
mod peek;
mod put;
mod reserve;
mod tubes;

pub(crate) use reserve::Wait;
#[cfg(test)]
pub(crate) use reserve::WaitEnd;
