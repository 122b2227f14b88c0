//! Environment variables (every `HPC_*` name of [`hpc_env`], re-exported), and
//! detection of who launched us.

use std::collections::HashMap;
use std::time::Duration;

// Every `HPC_*` variable is defined once, in hpc-env (name, meaning, default); the
// runtime's own ones are used from here as `env::RANK` etc.
pub use hpc_env::*;

/// Default timeout of blocking calls.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest timeout of blocking calls (`HPC_TIMEOUT`,
/// [`Config::timeout`](crate::Config::timeout), a coordinator's): a week.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(7 * 86400);

/// A timeout given by a program (`what` names it) that is none (0) or beyond
/// [`MAX_TIMEOUT`] is an error naming it: `Duration::MAX` panicked where a
/// deadline was computed ("overflow when adding duration to instant"), 0
/// failed at the first socket ("cannot set a 0 duration timeout"). For every
/// timeout a library takes from its caller (the runtime's, a communicator's).
///
/// ```
/// use std::time::Duration;
/// let e = hpc_runtime::env::check_timeout("Opts::timeout", Duration::MAX).unwrap_err();
/// assert!(e.starts_with("Opts::timeout = "));
/// assert!(hpc_runtime::env::check_timeout("t", Duration::from_secs(30)).is_ok());
/// ```
pub fn check_timeout(what: &str, timeout: Duration) -> Result<(), String> {
    if timeout.is_zero() || timeout > MAX_TIMEOUT {
        return Err(format!(
            "{what} = {timeout:?}: a timeout is above 0 and at most a week ({}s, as \
             {TIMEOUT} is)",
            MAX_TIMEOUT.as_secs()
        ));
    }
    Ok(())
}

/// The MPI launcher that started this process, as told by its environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MpiLauncher {
    /// Open MPI's `mpirun`/`mpiexec`/`prterun` (`OMPI_COMM_WORLD_*`).
    OpenMpi,
    /// MPICH's Hydra `mpiexec` (`PMI_RANK`/`PMI_SIZE`, `HYDRA_*`).
    Hydra,
    /// Slurm's `srun` with the PMIx plugin (`SLURM_STEP_ID` and `PMIX_RANK`).
    SlurmPmix,
    /// Slurm's `srun` without a PMI plugin for this MPI (`SLURM_STEP_ID`, no PMIx):
    /// Open MPI programs cannot wire up and start as independent singletons.
    SlurmNoPmi,
    /// A PMIx server other than Slurm's (`PMIX_RANK` only).
    Pmix,
}

impl MpiLauncher {
    /// A short human name.
    pub fn name(&self) -> &'static str {
        match self {
            MpiLauncher::OpenMpi => "Open MPI mpirun",
            MpiLauncher::Hydra => "MPICH Hydra mpiexec",
            MpiLauncher::SlurmPmix => "Slurm srun (PMIx)",
            MpiLauncher::SlurmNoPmi => "Slurm srun (no PMI plugin)",
            MpiLauncher::Pmix => "PMIx",
        }
    }
}

/// What the environment says about how this process was started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Detected {
    /// Started by `hpc run`.
    Launcher {
        /// Our rank.
        rank: usize,
        /// Job size.
        size: usize,
        /// Coordinator address.
        rendezvous: String,
        /// Job secret.
        secret: u64,
    },
    /// Started by an MPI launcher; `size_hint` is the size it announced, if any.
    Mpi {
        /// Which launcher.
        launcher: MpiLauncher,
        /// The size the launcher's variables announce.
        size_hint: Option<usize>,
    },
    /// Started as a plain program.
    Singleton,
}

fn num(env: &HashMap<String, String>, k: &str) -> Option<usize> {
    env.get(k).and_then(|v| v.trim().parse().ok())
}

/// Decides the bootstrap from an environment map. Pure, so it is tested on fixtures.
///
/// Order: an explicit `HPC_BOOTSTRAP`; the built-in launcher's variables (they are set
/// by `hpc run` for exactly this process, so they win over MPI variables inherited from
/// an outer job); MPI launchers (Open MPI, Hydra, PMIx, srun); else a singleton.
pub fn detect(env: &HashMap<String, String>) -> Result<Detected, String> {
    let forced = env.get(BOOTSTRAP).map(|s| s.trim().to_ascii_lowercase());
    match forced.as_deref() {
        Some("singleton") => return Ok(Detected::Singleton),
        Some("launcher") | Some("mpi") | None | Some("") | Some("auto") => {}
        Some(other) => {
            return Err(format!(
                "{BOOTSTRAP}={} is not one of auto, mpi, launcher, singleton",
                shown(other)
            ))
        }
    }
    let want_mpi = forced.as_deref() == Some("mpi");
    if !want_mpi && env.contains_key(RENDEZVOUS) {
        // The value named, cut and escaped (a number beyond the machine's
        // word, or text, was "missing or not a number" without it).
        let number = |k: &str| {
            num(env, k).ok_or_else(|| match env.get(k) {
                None => format!("{RENDEZVOUS} is set but {k} is missing"),
                Some(v) => format!(
                    "{RENDEZVOUS} is set but {k}={} is not a number of at most {}",
                    shown(v),
                    usize::MAX
                ),
            })
        };
        let rank = number(RANK)?;
        let size = number(SIZE)?;
        if size == 0 || rank >= size {
            return Err(format!("{RANK}={rank} is out of range for {SIZE}={size}"));
        }
        // The join carries both as 32-bit numbers: 2^32 + 1 ranks were said to
        // the launcher as 1, and refused only by its welcome ("protocol error:
        // welcome lists 1 ranks, expected 4294967297").
        if size > crate::wire::MAX_JOB_RANKS {
            return Err(format!(
                "{SIZE}={size} is more than the {} ranks a job has",
                crate::wire::MAX_JOB_RANKS
            ));
        }
        let secret = env
            .get(SECRET)
            .ok_or_else(|| format!("{RENDEZVOUS} is set but {SECRET} is missing"))?;
        // 17 hex digits or more were called "missing or not hex".
        let secret = u64::from_str_radix(secret.trim(), 16).map_err(|_| {
            format!(
                "{RENDEZVOUS} is set but {SECRET}={} is not a hex number of at most 16 digits",
                shown(secret)
            )
        })?;
        return Ok(Detected::Launcher {
            rank,
            size,
            rendezvous: env[RENDEZVOUS].clone(),
            secret,
        });
    }
    if forced.as_deref() == Some("launcher") {
        return Err(format!("{BOOTSTRAP}=launcher but {RENDEZVOUS} is not set"));
    }
    let mpi = if let Some(size) = num(env, "OMPI_COMM_WORLD_SIZE") {
        Some((MpiLauncher::OpenMpi, Some(size)))
    } else if env.contains_key("SLURM_STEP_ID") && env.contains_key("SLURM_PROCID") {
        let size = num(env, "SLURM_STEP_NUM_TASKS").or_else(|| num(env, "SLURM_NTASKS"));
        if env.contains_key("PMIX_RANK") {
            Some((MpiLauncher::SlurmPmix, size))
        } else if env.contains_key("PMI_RANK") || env.contains_key("PMI_FD") {
            Some((MpiLauncher::Hydra, size))
        } else {
            Some((MpiLauncher::SlurmNoPmi, size))
        }
    } else if env.contains_key("PMI_RANK") || env.contains_key("PMI_FD") {
        Some((MpiLauncher::Hydra, num(env, "PMI_SIZE")))
    } else if env.contains_key("PMIX_RANK") {
        Some((MpiLauncher::Pmix, None))
    } else {
        None
    };
    match mpi {
        Some((launcher, size_hint)) => Ok(Detected::Mpi {
            launcher,
            size_hint,
        }),
        None if want_mpi => Ok(Detected::Mpi {
            launcher: MpiLauncher::Pmix,
            size_hint: None,
        }),
        None => Ok(Detected::Singleton),
    }
}

/// What a plain run (a [`Detected::Singleton`]) says of the built-in
/// launcher's variables set by hand: `HPC_SIZE=4 ./app` runs one rank, since
/// only `hpc run` (which also sets `HPC_RENDEZVOUS`) starts several; said,
/// not silently taken. `None` where none is set or `HPC_BOOTSTRAP=singleton`
/// asks for exactly that.
pub fn stray_launcher_vars(env: &HashMap<String, String>) -> Option<String> {
    let forced = env.get(BOOTSTRAP).map(|s| s.trim().to_ascii_lowercase());
    if forced.as_deref() == Some("singleton") {
        return None;
    }
    let set: Vec<String> = [SIZE, RANK, LOCAL_SIZE, LOCAL_RANK]
        .into_iter()
        .filter_map(|k| env.get(k).map(|v| format!("{k}={}", shown(v))))
        .collect();
    if set.is_empty() {
        return None;
    }
    Some(format!(
        "{} set without {RENDEZVOUS}: those are the launcher's; this process runs as \
         the only rank (start the job with `hpc run -n N`, or unset them)",
        set.join(" ")
    ))
}

/// The launchers' variables that [`detect`] and the log's rank tag read: one of them
/// that is not UTF-8 is an error, not a variable skipped.
pub const LAUNCHER_VARS: &[&str] = &[
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "SLURM_STEP_ID",
    "SLURM_PROCID",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_NTASKS",
    "PMIX_RANK",
    "PMI_RANK",
    "PMI_FD",
    "PMI_SIZE",
];

/// Whether the runtime reads `name`: an `HPC_*` variable or one of
/// [`LAUNCHER_VARS`].
pub fn is_ours(name: &str) -> bool {
    name.starts_with("HPC_") || LAUNCHER_VARS.contains(&name)
}

/// The environment as UTF-8 text, from `vars` (name, value) pairs as
/// [`std::env::vars_os`] gives them. A variable whose name or value is not UTF-8
/// is skipped (logged at debug level, its name shown lossily) unless the runtime
/// reads it ([`is_ours`]): then it is an error naming it, since skipping it would
/// read as unset.
///
/// ```
/// use std::ffi::OsString;
/// use std::os::unix::ffi::OsStringExt;
/// use hpc_runtime::env::{vars_from, LOG, TIMEOUT};
/// let bad = OsString::from_vec(vec![0xff]);
/// let env = vars_from([
///     (OsString::from("FOO"), bad.clone()),
///     (OsString::from(LOG), OsString::from("info")),
/// ])
/// .unwrap();
/// assert_eq!(env.len(), 1);
/// let err = vars_from([(OsString::from(TIMEOUT), bad)]).unwrap_err();
/// assert!(err.contains(TIMEOUT) && err.contains("not valid UTF-8"));
/// ```
///
/// # Errors
///
/// A message naming the first variable of ours that is not UTF-8.
pub fn vars_from(
    vars: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Result<HashMap<String, String>, String> {
    let mut env = HashMap::new();
    for (k, v) in vars {
        match (k.into_string(), v.into_string()) {
            (Ok(k), Ok(v)) => {
                env.insert(k, v);
            }
            (Ok(k), Err(v)) if is_ours(&k) => {
                return Err(format!(
                    "{k}={} is not valid UTF-8 (shown with U+FFFD for the invalid bytes)",
                    shown(&v.to_string_lossy())
                ))
            }
            (k, _) => {
                let name = match &k {
                    Ok(k) => k.clone(),
                    Err(k) => k.to_string_lossy().into_owned(),
                };
                if k.is_err() && is_ours(&name) {
                    return Err(format!(
                        "the environment variable named {name:?} is not valid UTF-8"
                    ));
                }
                tracing::debug!(variable = %name, "skipped an environment variable that is not UTF-8");
            }
        }
    }
    Ok(env)
}

/// [`vars_from`] this process's environment.
///
/// # Errors
///
/// Those of [`vars_from`].
pub fn vars() -> Result<HashMap<String, String>, String> {
    vars_from(std::env::vars_os())
}

/// One variable of ours: `None` when unset, an error naming it when its value is
/// not UTF-8 (where [`std::env::var`]`(..).ok()` would read it as unset).
///
/// # Errors
///
/// A message naming the variable.
pub fn var(name: &str) -> Result<Option<String>, String> {
    match std::env::var_os(name) {
        None => Ok(None),
        Some(v) => v.into_string().map(Some).map_err(|v| {
            format!(
                "{name}={} is not valid UTF-8 (shown with U+FFFD for the invalid bytes)",
                shown(&v.to_string_lossy())
            )
        }),
    }
}

/// The longest spin a setting may ask for (`HPC_SPIN_US`, `HPC_COLL_PROXY_SPIN_US`),
/// in microseconds: a second. Polling longer before sleeping only burns a core.
pub const MAX_SPIN_US: u64 = 1_000_000;

/// How many (variable, value) pairs [`first_warning`] remembers; past that,
/// every warning is given.
const WARNED_MAX: usize = 256;

/// Whether this process has not warned yet about variable `name` holding
/// `value` (`""` for a value that is not UTF-8). Several parts of the SDK read
/// the same setting (the placement, the choice of engine, the communicator),
/// and each warned: one bad `HPC_PROGRESS_CPUSET` was said three times by one
/// `init` and `comm`. A setting is warned about once per value.
fn first_warning(name: &str, value: &str) -> bool {
    use std::hash::{Hash, Hasher};
    static WARNED: std::sync::Mutex<std::collections::BTreeSet<(String, u64)>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut h = std::collections::hash_map::DefaultHasher::new();
    value.hash(&mut h);
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    if warned.len() >= WARNED_MAX {
        return true;
    }
    warned.insert((name.to_string(), h.finish()))
}

/// A whole-number setting of ours, parsed from `value` (the variable's value, or
/// `None` when unset): `None` when unset, and also when it is not a number, with a
/// warning naming the variable and its value (the default then applies: a rank
/// refusing to start over a tuning knob would lose the job); a number above `max` is
/// `max`, with a warning.
///
/// ```
/// use hpc_runtime::env::{number_from, SPIN_US};
/// assert_eq!(number_from(SPIN_US, Some("20"), 100u64), Some(20));
/// assert_eq!(number_from(SPIN_US, Some("x"), 100u64), None);
/// assert_eq!(number_from(SPIN_US, Some("18446744073709551615"), 100u64), Some(100));
/// // Too large even for the type: the most it may be as well.
/// assert_eq!(number_from(SPIN_US, Some("99999999999999999999999"), 100u64), Some(100));
/// assert_eq!(number_from::<u64>(SPIN_US, None, 100), None);
/// ```
pub fn number_from<T>(name: &str, value: Option<&str>, max: T) -> Option<T>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
{
    let v = value?;
    let (taken, problem) = number_verdict(name, v, max);
    if let Some(p) = problem {
        if first_warning(name, v) {
            tracing::warn!(variable = name, "{p}");
        }
    }
    taken
}

/// What a whole-number setting's value `v` is taken as, and what is wrong
/// with it (the warning of [`number_from`], the same line a launch check
/// gives: [`number_problem`]).
fn number_verdict<T>(name: &str, v: &str, max: T) -> (Option<T>, Option<String>)
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
{
    let digits = !v.trim().is_empty() && v.trim().bytes().all(|b| b.is_ascii_digit());
    // Only digits are a whole number, whatever `T` parses: a float type
    // took `nan` (no number compares at most `max`) as "above the most it
    // may be", and `1.5` or `inf` as numbers.
    match v.trim().parse::<T>() {
        Ok(n) if digits && n <= max => (Some(n), None),
        // Above `max`, or digits too many for the type.
        Ok(_) | Err(_) if digits => (
            Some(max),
            Some(format!(
                "{name}={} is above the most it may be, {max}; using {max}",
                shown(v)
            )),
        ),
        _ => (
            None,
            Some(format!(
                "{name}={} is not a whole number (0 to {max}); using the default",
                shown(v)
            )),
        ),
    }
}

/// What [`number`] would warn about this process's variable `name` (at
/// most `max`), without warning: `None` when it is unset or good. For a
/// launch check (`hpc selftest`) that says what a job's warnings pass by.
///
/// ```
/// use hpc_runtime::env::number_problem;
/// assert_eq!(number_problem("MYAPP_NOT_SET_ANYWHERE", 10u64), None);
/// ```
pub fn number_problem<T>(name: &str, max: T) -> Option<String>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
{
    match var(name) {
        Ok(v) => number_verdict(name, v.as_deref()?, max).1,
        Err(e) => Some(format!("{e}; using the default")),
    }
}

/// [`number_from`] this process's variable `name`; a value that is not UTF-8 is
/// warned about and ignored the same way.
pub fn number<T>(name: &str, max: T) -> Option<T>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
{
    match var(name) {
        Ok(v) => number_from(name, v.as_deref(), max),
        Err(e) => {
            if first_warning(name, "") {
                tracing::warn!(variable = name, "{e}; using the default");
            }
            None
        }
    }
}

/// A yes/no setting's value (`HPC_BIND`): `1` or `0`, nothing else (a `false` or
/// `no` read as "not 0" would do the opposite of what it says), for [`parsed`].
///
/// ```
/// use hpc_runtime::env::flag;
/// assert_eq!(flag(" 1"), Ok(true));
/// assert_eq!(flag("0"), Ok(false));
/// assert!(flag("false").unwrap_err().contains("`1` or `0`"));
/// ```
pub fn flag(value: &str) -> Result<bool, String> {
    match value.trim() {
        "1" => Ok(true),
        "0" => Ok(false),
        _ => Err("not `1` or `0`".into()),
    }
}

/// A setting of ours read with `parse` (a CPU list, say): `None` when unset, and
/// also when `parse` refuses it or it is not UTF-8, with a warning naming the
/// variable, its value and why (the default then applies).
///
/// ```
/// use hpc_runtime::env::parsed;
/// // Unset here.
/// assert_eq!(parsed("MYAPP_NOT_SET_ANYWHERE", |v| v.parse::<u8>()), None);
/// ```
pub fn parsed<T, E: std::fmt::Display>(
    name: &str,
    parse: impl FnOnce(&str) -> Result<T, E>,
) -> Option<T> {
    let (taken, problem) = parsed_verdict(name, parse);
    if let Some((value, p)) = problem {
        if first_warning(name, &value) {
            tracing::warn!(variable = name, "{p}");
        }
    }
    taken
}

/// What [`parsed`] takes this process's variable `name` as, and what is
/// wrong with it (the value, `""` where it is not UTF-8, and the warning).
fn parsed_verdict<T, E: std::fmt::Display>(
    name: &str,
    parse: impl FnOnce(&str) -> Result<T, E>,
) -> (Option<T>, Option<(String, String)>) {
    match var(name) {
        Ok(None) => (None, None),
        Ok(Some(v)) => match parse(&v) {
            Ok(t) => (Some(t), None),
            Err(e) => {
                let p = format!("{name}={} is ignored: {e}", shown(&v));
                (None, Some((v, p)))
            }
        },
        Err(e) => (None, Some((String::new(), format!("{e}; it is ignored")))),
    }
}

/// What [`parsed`] would warn about this process's variable `name`, without
/// warning: `None` when it is unset or `parse` takes it. For a launch check
/// (`hpc selftest`) that says what a job's warnings pass by.
///
/// ```
/// use hpc_runtime::env::parsed_problem;
/// assert_eq!(parsed_problem("MYAPP_NOT_SET_ANYWHERE", |v| v.parse::<u8>()), None);
/// ```
pub fn parsed_problem<T, E: std::fmt::Display>(
    name: &str,
    parse: impl FnOnce(&str) -> Result<T, E>,
) -> Option<String> {
    parsed_verdict(name, parse).1.map(|(_, p)| p)
}

/// Reads the timeout from `HPC_TIMEOUT` (seconds), falling back to the default.
pub fn timeout_from(env: &HashMap<String, String>) -> Result<Duration, String> {
    match env.get(TIMEOUT) {
        None => Ok(DEFAULT_TIMEOUT),
        Some(v) => match v.trim().parse::<f64>() {
            // Above 0 as a `Duration` too: 1e-10 s is none (it counts whole
            // nanoseconds), and a zero timeout failed every wait at once.
            Ok(s) if s.is_finite() && s > 0.0 && s <= MAX_TIMEOUT.as_secs_f64() => {
                Some(Duration::from_secs_f64(s))
                    .filter(|d| !d.is_zero())
                    .ok_or_else(|| {
                        format!(
                            "{TIMEOUT}={} is less than a nanosecond: not a positive number of \
                             seconds (at most a week)",
                            shown(v)
                        )
                    })
            }
            _ => Err(format!(
                "{TIMEOUT}={} is not a positive number of seconds (at most a week)",
                shown(v)
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStringExt as _;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn plain_program_is_a_singleton() {
        assert_eq!(detect(&env(&[("HOME", "/root")])), Ok(Detected::Singleton));
    }

    /// Passes 12 and 15: `HPC_SIZE=4 ./app` ran one rank without a word.
    #[test]
    fn launcher_variables_without_the_launcher_are_said() {
        assert_eq!(stray_launcher_vars(&env(&[("HOME", "/root")])), None);
        let e = env(&[(SIZE, "4"), (RANK, "3")]);
        assert_eq!(detect(&e), Ok(Detected::Singleton));
        let why = stray_launcher_vars(&e).unwrap();
        assert!(
            why.contains("HPC_SIZE=\"4\"")
                && why.contains("HPC_RANK=\"3\"")
                && why.contains("only rank"),
            "{why}"
        );
        let asked = env(&[(SIZE, "4"), (BOOTSTRAP, "singleton")]);
        assert_eq!(stray_launcher_vars(&asked), None);
    }

    #[test]
    fn launcher_variables() {
        let e = env(&[
            (RANK, "2"),
            (SIZE, "4"),
            (RENDEZVOUS, "127.0.0.1:5000"),
            (SECRET, "ff"),
        ]);
        assert_eq!(
            detect(&e),
            Ok(Detected::Launcher {
                rank: 2,
                size: 4,
                rendezvous: "127.0.0.1:5000".into(),
                secret: 255
            })
        );
        let bad = env(&[(RANK, "4"), (SIZE, "4"), (RENDEZVOUS, "x"), (SECRET, "1")]);
        assert!(detect(&bad).unwrap_err().contains("out of range"));
        let nosecret = env(&[(RANK, "0"), (SIZE, "1"), (RENDEZVOUS, "x")]);
        assert!(detect(&nosecret).is_err());
    }

    /// Hostile-user pass 15: values of 100,000 characters were echoed whole (a
    /// warning per rank of 400 kB for `HPC_SPIN_US`), and a secret of 40 hex
    /// digits was "missing or not hex".
    #[test]
    fn long_values_are_cut_and_a_long_secret_is_said_so() {
        let long = "7".repeat(100_000);
        let e = timeout_from(&env(&[(TIMEOUT, &long)])).unwrap_err();
        assert!(e.len() < 200 && e.contains("more characters"), "{e}");
        let e = detect(&env(&[(BOOTSTRAP, &long)])).unwrap_err();
        assert!(e.len() < 200, "{e}");
        let e = detect(&env(&[
            (RANK, "0"),
            (SIZE, "1"),
            (RENDEZVOUS, "127.0.0.1:1"),
            (SECRET, &"f".repeat(40)),
        ]))
        .unwrap_err();
        assert!(
            e.contains("is not a hex number of at most 16 digits"),
            "{e}"
        );
        // A rank or size that is no number, or beyond the machine's word,
        // is named with its value (hostile pass 19).
        for (k, v) in [(SIZE, "99999999999999999999"), (RANK, "two"), (SIZE, "-1")] {
            let mut e = env(&[(RANK, "0"), (SIZE, "1"), (RENDEZVOUS, "127.0.0.1:1")]);
            e.insert(k.to_string(), v.to_string());
            let why = detect(&e).unwrap_err();
            assert!(
                why.contains(&format!("{k}=\"{v}\" is not a number")),
                "{why}"
            );
        }
        let e = detect(&env(&[(SIZE, "1"), (RENDEZVOUS, "127.0.0.1:1")])).unwrap_err();
        assert!(e.ends_with("HPC_RANK is missing"), "{e}");
        let missing = env(&[(RANK, "0"), (SIZE, "1"), (RENDEZVOUS, "127.0.0.1:1")]);
        assert!(detect(&missing).unwrap_err().ends_with("is missing"));
        let bad = std::ffi::OsString::from_vec(vec![0xff; 50_000]);
        let e = vars_from([(std::ffi::OsString::from(TIMEOUT), bad)]).unwrap_err();
        assert!(e.len() < 300, "{e}");
    }

    #[test]
    fn launcher_wins_over_inherited_mpi() {
        let e = env(&[
            (RANK, "0"),
            (SIZE, "2"),
            (RENDEZVOUS, "h:1"),
            (SECRET, "1"),
            ("OMPI_COMM_WORLD_SIZE", "8"),
        ]);
        assert!(matches!(detect(&e), Ok(Detected::Launcher { .. })));
    }

    #[test]
    fn mpi_launchers() {
        let ompi = env(&[("OMPI_COMM_WORLD_SIZE", "4"), ("OMPI_COMM_WORLD_RANK", "1")]);
        assert_eq!(
            detect(&ompi),
            Ok(Detected::Mpi {
                launcher: MpiLauncher::OpenMpi,
                size_hint: Some(4)
            })
        );
        let srun = env(&[
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "1"),
            ("SLURM_STEP_NUM_TASKS", "2"),
            ("PMIX_RANK", "1"),
        ]);
        assert_eq!(
            detect(&srun),
            Ok(Detected::Mpi {
                launcher: MpiLauncher::SlurmPmix,
                size_hint: Some(2)
            })
        );
        let srun_nopmi = env(&[
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
        ]);
        assert!(matches!(
            detect(&srun_nopmi),
            Ok(Detected::Mpi {
                launcher: MpiLauncher::SlurmNoPmi,
                ..
            })
        ));
        let hydra = env(&[("PMI_RANK", "0"), ("PMI_SIZE", "3")]);
        assert_eq!(
            detect(&hydra),
            Ok(Detected::Mpi {
                launcher: MpiLauncher::Hydra,
                size_hint: Some(3)
            })
        );
    }

    #[test]
    fn forced_bootstrap() {
        let e = env(&[(BOOTSTRAP, "singleton"), ("OMPI_COMM_WORLD_SIZE", "4")]);
        assert_eq!(detect(&e), Ok(Detected::Singleton));
        assert!(detect(&env(&[(BOOTSTRAP, "launcher")])).is_err());
        assert!(detect(&env(&[(BOOTSTRAP, "pigeon")])).is_err());
    }

    #[test]
    fn numbers_warn_and_fall_back_or_cap() {
        assert_eq!(number_from(SPIN_US, Some(" 7 "), MAX_SPIN_US), Some(7));
        for bad in ["x", "-1", "1.5", ""] {
            assert_eq!(number_from(SPIN_US, Some(bad), MAX_SPIN_US), None, "{bad}");
        }
        assert_eq!(
            number_from(SPIN_US, Some("18446744073709551615"), MAX_SPIN_US),
            Some(MAX_SPIN_US)
        );
        assert_eq!(number_from::<usize>(STAGE_MAX, None, usize::MAX), None);
    }

    /// A float type: `nan` was "above the most it may be" (it compares at
    /// most nothing) and taken as `max`; `1.5` and `inf` as numbers. Only
    /// digits are a whole number, whatever the type parses.
    #[test]
    fn only_digits_are_a_whole_number_of_any_type() {
        for bad in ["nan", "NaN", "inf", "1.5", "-0", "1e3"] {
            assert_eq!(number_from(SPIN_US, Some(bad), 100.0f64), None, "{bad}");
        }
        assert_eq!(number_from(SPIN_US, Some("7"), 100.0f64), Some(7.0));
        assert_eq!(number_from(SPIN_US, Some("700"), 100.0f64), Some(100.0));
    }

    /// A timeout of less than a nanosecond is no timeout (a `Duration` of
    /// 0): `1e-10` and `5e-324` were taken, and every wait failed at once.
    #[test]
    fn a_timeout_below_a_nanosecond_is_refused() {
        for tiny in ["1e-10", "5e-324", "0.0000000001"] {
            let e = timeout_from(&env(&[(TIMEOUT, tiny)])).unwrap_err();
            assert!(
                e.contains(TIMEOUT) && e.contains("nanosecond"),
                "{tiny}: {e}"
            );
        }
        assert_eq!(
            timeout_from(&env(&[(TIMEOUT, "1e-9")])),
            Ok(Duration::from_nanos(1))
        );
    }

    #[test]
    fn timeout_parsing() {
        assert_eq!(timeout_from(&env(&[])), Ok(DEFAULT_TIMEOUT));
        assert_eq!(
            timeout_from(&env(&[(TIMEOUT, "2.5")])),
            Ok(Duration::from_millis(2500))
        );
        for bad in ["0", "-1", "abc", "inf", "NaN"] {
            assert!(timeout_from(&env(&[(TIMEOUT, bad)])).is_err(), "{bad}");
        }
    }
}
