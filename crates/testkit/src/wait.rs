//! Waiting for what a test expects, with a deadline, instead of sleeping a fixed time: the
//! wait ends as soon as the condition holds, and a failure says what never happened and what
//! was seen instead.

use std::fmt::Display;
use std::time::{Duration, Instant};

/// How often a condition is checked again.
const POLL: Duration = Duration::from_millis(10);

/// What a check gives: the value waited for, or what it saw instead (shown if time runs out).
pub trait Checked<T> {
    fn checked(self) -> Result<T, String>;
}

/// `true` when the condition holds.
impl Checked<()> for bool {
    fn checked(self) -> Result<(), String> {
        if self { Ok(()) } else { Err("not yet".into()) }
    }
}

/// The value once there is one.
impl<T> Checked<T> for Option<T> {
    fn checked(self) -> Result<T, String> {
        self.ok_or_else(|| "nothing yet".into())
    }
}

/// The value, or what was seen instead.
impl<T, E: Display> Checked<T> for Result<T, E> {
    fn checked(self) -> Result<T, String> {
        self.map_err(|e| e.to_string())
    }
}

/// Checks `check` until it gives its value; fails the test after `timeout`, naming `what` and
/// the last thing `check` saw instead.
#[track_caller]
pub fn until<T, C: Checked<T>>(what: &str, timeout: Duration, mut check: impl FnMut() -> C) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match check().checked() {
            Ok(v) => return v,
            Err(seen) if Instant::now() >= deadline => {
                panic!("timed out after {timeout:?} waiting for {what}; last seen: {seen}")
            }
            Err(_) => std::thread::sleep(POLL),
        }
    }
}

/// As [`until`], in async code: the test's runtime keeps running while it waits.
#[cfg(feature = "tokio")]
pub async fn until_async<T, C: Checked<T>>(
    what: &str,
    timeout: Duration,
    mut check: impl AsyncFnMut() -> C,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match check().await.checked() {
            Ok(v) => return v,
            Err(seen) if Instant::now() >= deadline => {
                panic!("timed out after {timeout:?} waiting for {what}; last seen: {seen}")
            }
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_ends_when_the_check_gives_its_value() {
        let mut calls = 0;
        let v = until("the third call", Duration::from_secs(5), || {
            calls += 1;
            (calls == 3).then_some(calls)
        });
        assert_eq!(v, 3);
    }

    #[test]
    #[should_panic(expected = "waiting for a frame from pod a; last seen: 2 frames, none from it")]
    fn a_timeout_names_what_never_happened_and_what_was_seen() {
        until("a frame from pod a", Duration::from_millis(30), || {
            Err::<(), _>("2 frames, none from it")
        });
    }
}
