//! The data plane's answer to `POST /trace`: the trace's logic is the compiler's
//! ([`hns_compiler::explain`]); here it runs on the live switch, under the data plane's lock,
//! on the pump's clock.

use std::sync::Weak;
use std::time::Instant;

use hns::trace::Tracer;
use hns_compiler::explain::trace;
use vfp::Timestamp;

use crate::Shared;

/// The tracer the data plane registers with the service. The switch's clock is the pump's:
/// nanoseconds since the data plane started (this is called just before the pump starts).
pub(crate) fn tracer(shared: Weak<Shared>) -> Tracer {
    let epoch = Instant::now();
    Box::new(move |req| {
        crate::ask_switch(&shared, |state, node, c| {
            let now = Timestamp(u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX));
            trace(state, c, node, req, now)
        })
    })
}
