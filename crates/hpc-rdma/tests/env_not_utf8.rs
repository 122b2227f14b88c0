//! `HPC_TRANSPORT` whose value is not UTF-8: an error naming the variable,
//! not a variable read as unset. (The only test of this binary: it sets the
//! process's variables.)

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;

/// `HPC_TRANSPORT=$'tc\xffp'` was read as unset (`std::env::var(..)`'s
/// error taken as absent): `auto` chose the transport, without a word, where
/// a value that names no transport is refused by name.
#[test]
fn a_transport_that_is_not_utf8_is_an_error_naming_it() {
    let name = hpc_runtime::env::TRANSPORT;
    std::env::set_var(name, OsStr::from_bytes(b"tc\xffp"));
    let r = hpc_rdma::Options::from_env().map(|o| format!("{:?}", o.backend));
    std::env::remove_var(name);
    let e = r.unwrap_err().to_string();
    assert!(e.contains(name) && e.contains("not valid UTF-8"), "{e}");
}
