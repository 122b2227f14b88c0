//! The /proc and /sys parsers never panic, whatever they are given.

use hpc_container::parse;
use hpc_container::{parse_env_file, Environment, Probe};
use proptest::prelude::*;

/// Every parser over `s` (each must return, whatever `s` is).
fn every_parser(s: &str) {
    let _ = parse::mountinfo(s);
    let _ = parse::cgroup(s);
    let _ = parse::limits(s);
    let _ = parse::status(s);
    let _ = parse::cpulist(s);
    let _ = parse::key_values(s);
    let _ = parse::size_bytes(s);
    let _ = parse::cpu_max(s);
    let _ = parse::memory_limit(s);
    let _ = parse::cap_mask(s);
    let _ = parse::port_state(s);
    let _ = parse::unescape_octal(s);
    let _ = parse_env_file(s);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn parsers_survive_random_strings(s in ".{0,400}") {
        every_parser(&s);
    }

    #[test]
    fn parsers_survive_random_bytes(b in proptest::collection::vec(any::<u8>(), 0..600)) {
        every_parser(&String::from_utf8_lossy(&b));
    }

    #[test]
    fn structured_lookalikes(
        a in "[0-9a-z:,\\-\\\\ /=^]{0,80}",
        n in any::<u64>(),
        m in any::<u32>(),
    ) {
        let line = format!("{m} {n} 0:{m} {a} /x{a} rw - {a} {a} rw,size={a}\n");
        let _ = parse::mountinfo(&line);
        let _ = parse::cpulist(&format!("{m}-{n},{a}"));
        let _ = parse::limits(&format!("Max locked memory {n} {a} bytes\n"));
        let _ = parse::cpu_max(&format!("{n} {m}"));
        let _ = parse::cgroup(&format!("{m}:{a}:{a}\n"));
        let _ = parse::size_bytes(&format!("{n}{a}"));
    }

    #[test]
    fn cpulist_roundtrip(cpus in proptest::collection::btree_set(0u32..4096, 0..64)) {
        let list: Vec<String> = cpus.iter().map(|c| c.to_string()).collect();
        let parsed = parse::cpulist(&list.join(","));
        prop_assert_eq!(parsed, Some(cpus.into_iter().collect::<Vec<_>>()));
    }
}

/// A root whose every interesting file holds the same random bytes.
#[test]
fn detection_survives_random_files() {
    let dir = hpc_test_support::TmpDir::unmade("hpc-container", "prop");
    let files = [
        "proc/self/mountinfo",
        "proc/self/status",
        "proc/self/limits",
        "proc/self/cgroup",
        "proc/1/cgroup",
        "proc/1/environ",
        "sys/devices/system/cpu/online",
        "sys/fs/cgroup/cpu.max",
        "sys/fs/cgroup/memory.max",
        "run/.containerenv",
        ".singularity.d/labels.json",
        "run/systemd/container",
        "proc/sys/kernel/yama/ptrace_scope",
        "sys/class/infiniband/mlx5_0/ports/1/state",
        "etc/libibverbs.d/x.driver",
    ];
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(48));
    runner
        .run(&proptest::collection::vec(any::<u8>(), 0..300), |bytes| {
            for f in files {
                let p = dir.join(f);
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(&p, &bytes).unwrap();
            }
            let env = parse_env_file(&String::from_utf8_lossy(&bytes));
            let e = Environment::detect_from(&Probe::new(&dir, env));
            let _ = e.diagnose();
            let _ = hpc_container::Report::new("x", e).to_json();
            Ok(())
        })
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
