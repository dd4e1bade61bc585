//! What the verbs print. Stdout carries a verb's answer: when its reader goes away
//! (`winnet cluster status | head -1`), the verb stops with [`StdoutClosed`], unwinding through
//! its own clean-up, and `winnet` exits quietly with status 141, as a shell reports `ip` or
//! `kubectl` ended by the closed pipe. Stderr carries progress and notes: a closed stderr loses
//! them and nothing else. SIGPIPE stays ignored (Rust's default), so a daemon writing to a
//! client's closed socket gets an error for that client instead of dying.

use std::fmt;
use std::io::{self, Write};

/// Stdout's reader went away.
#[derive(Debug)]
pub struct StdoutClosed;

impl fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("stdout was closed by its reader")
    }
}

impl std::error::Error for StdoutClosed {}

/// The exit status of a verb whose stdout was closed: 128 + SIGPIPE.
pub const STDOUT_CLOSED_STATUS: u8 = 141;

/// Writes `args` and a newline to stdout, flushed.
pub fn answer(args: fmt::Arguments<'_>) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    match out
        .write_fmt(args)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
    {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        Err(e) => Err(anyhow::Error::new(e).context("cannot write to stdout")),
    }
}

/// Writes `args` and a newline to stderr; a closed stderr is not an error.
pub fn progress(args: fmt::Arguments<'_>) {
    let _ = writeln!(io::stderr().lock(), "{args}");
}

/// True when `e`, or an error it wraps, is [`StdoutClosed`].
pub fn is_stdout_closed(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<StdoutClosed>())
}

/// `println!` for a verb's answer: `outln!(...)?` ends the verb when stdout is closed.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::answer(format_args!($($arg)*))
    };
}

/// `eprintln!` for progress and notes, which a closed stderr does not stop.
macro_rules! note {
    ($($arg:tt)*) => {
        $crate::output::progress(format_args!($($arg)*))
    };
}

pub(crate) use {note, outln};
