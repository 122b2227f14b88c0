//! The result lines are not silently lost: stdout on a full device is an error that
//! names it; a reader that goes away (`| head`) is not.

use std::process::Command;

use hpc_test_support::output;

#[test]
fn stdout_on_a_full_device_fails_naming_it_and_a_closed_one_does_not() {
    // The smallest run.
    output::assert_run_lines_not_lost(env!("CARGO_BIN_EXE_fft3d"), &["--n", "8"]);
}

/// The last message is one write: `hpc run` stopping a rank between the pieces of
/// `writeln!` left `fft3d: error: ` cut short.
#[test]
fn the_last_message_is_written_whole() {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fft3d"));
    c.args(["--n", "8", "--tolerance", "NaN"]);
    output::assert_last_words_whole(&mut c, "fft3d", 1, "--tolerance");
}
