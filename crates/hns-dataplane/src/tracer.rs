//! The data plane's answer to `POST /trace`: the trace's logic is the compiler's
//! ([`hns_compiler::explain`]); here it runs on the live switch, under the data plane's lock,
//! on the pump's clock.

use std::sync::Weak;
use std::time::Instant;

use hcn::error::HnsError;
use hns::trace::{NO_DATAPLANE, Tracer};
use hns_compiler::explain::trace;
use vfp::Timestamp;

use crate::Shared;

/// The tracer the data plane registers with the service. The switch's clock is the pump's:
/// nanoseconds since the data plane started (this is called just before the pump starts).
pub(crate) fn tracer(shared: Weak<Shared>) -> Tracer {
    let epoch = Instant::now();
    Box::new(move |req| {
        let stopping = || HnsError::new(NO_DATAPLANE, "the data plane is stopping");
        let shared = shared
            .upgrade()
            .filter(|s| !s.stopping())
            .ok_or_else(stopping)?;
        let mut answer = Err(stopping());
        shared.with_state(|state, inner, _| {
            let now = Timestamp(u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX));
            let node = inner.node_name.clone();
            answer = match inner.compiler.as_mut() {
                Some(c) => trace(state, c, &node, req, now),
                None => Err(HnsError::new(
                    NO_DATAPLANE,
                    "the data plane has not compiled the objects yet; try again in a moment",
                )),
            };
        });
        answer
    })
}
