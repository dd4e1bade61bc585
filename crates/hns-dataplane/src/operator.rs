//! The data plane's answer to `POST /linux/switch/rules`: an operator's hand edit of the live
//! switch ([`hns_compiler::operator`]), made under the data plane's lock.

use std::sync::Weak;

use hns::trace::Operator;

use crate::Shared;

/// The operator hook the data plane registers with the service.
pub(crate) fn operator(shared: Weak<Shared>) -> Operator {
    Box::new(move |edit| {
        crate::ask_switch(&shared, |_, _, c| {
            hns_compiler::operator::edit_rules(c, edit)
        })
    })
}
