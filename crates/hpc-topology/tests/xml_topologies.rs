//! Real topologies from hwloc's test suite: object counts (against the README and
//! against `hwloc-info` when installed) and placements.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use hpc_topology::{
    plan, CpuSet, NicKind, PlacementPlan, PlacementRequest, Policy, Topology, TopologyError,
};

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn load(name: &str) -> Topology {
    Topology::from_xml_file(data(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

const FILES: [&str; 5] = [
    "16amd64-8n2c-cpusets.xml",
    "16em64t-4s2c2t.xml",
    "192em64t-24n8c2t.xml",
    "24em64t-2n6c2t-pci.xml",
    "32em64t-2n8c2t-pci-wholeio.xml",
];

/// (file, packages, NUMA nodes, cores, PUs, GPUs, NICs), from the README and lstopo.
const KNOWN: [(&str, usize, usize, usize, usize, usize, usize); 5] = [
    ("16amd64-8n2c-cpusets.xml", 6, 5, 10, 10, 0, 0),
    ("16em64t-4s2c2t.xml", 4, 1, 8, 16, 0, 0),
    ("192em64t-24n8c2t.xml", 24, 24, 192, 384, 0, 7),
    ("24em64t-2n6c2t-pci.xml", 2, 2, 12, 24, 0, 3),
    ("32em64t-2n8c2t-pci-wholeio.xml", 2, 2, 16, 32, 2, 3),
];

#[test]
fn known_counts() {
    for (file, packages, numa, cores, pus, gpus, nics) in KNOWN {
        let t = load(file);
        assert_eq!(
            (
                t.packages.len(),
                t.numa_nodes.len(),
                t.cores.len(),
                t.pus.len(),
                t.gpus.len(),
                t.nics.len()
            ),
            (packages, numa, cores, pus, gpus, nics),
            "{file}"
        );
    }
}

fn hwloc_info(args: &[&str]) -> Option<String> {
    let out = Command::new("hwloc-info").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `hwloc-info --input FILE` lines like ` depth 1:   2 Package (type #1)`.
fn hwloc_count(summary: &str, ty: &str) -> usize {
    summary
        .lines()
        .filter_map(|l| {
            let (_, rest) = l.split_once(':')?;
            let mut words = rest.split_whitespace();
            let n: usize = words.next()?.parse().ok()?;
            (words.next()? == ty).then_some(n)
        })
        .sum()
}

/// OS devices as `hwloc-info --input FILE osdev:all` lists them: (name, osdev type).
fn hwloc_osdevs(file: &str) -> Option<Vec<(String, String)>> {
    let text = hwloc_info(&["--input", data(file).to_str()?, "osdev:all"])?;
    let mut out = Vec::new();
    let mut name = None;
    for line in text.lines() {
        if let Some(n) = line.strip_prefix(" name = ") {
            name = Some(n.to_string());
        }
        if let Some(t) = line.strip_prefix(" attr osdev type = ") {
            out.push((name.take().unwrap_or_default(), t.to_string()));
        }
    }
    Some(out)
}

#[test]
fn counts_match_hwloc_info() {
    if hwloc_info(&["--version"]).is_none() {
        eprintln!("hwloc-info not installed: skipping the comparison");
        return;
    }
    for file in FILES {
        let t = load(file);
        let summary =
            hwloc_info(&["--input", data(file).to_str().unwrap()]).expect("hwloc-info runs");
        assert_eq!(
            t.packages.len(),
            hwloc_count(&summary, "Package"),
            "{file} packages"
        );
        assert_eq!(
            t.numa_nodes.len(),
            hwloc_count(&summary, "NUMANode"),
            "{file} NUMA"
        );
        assert_eq!(t.cores.len(), hwloc_count(&summary, "Core"), "{file} cores");
        assert_eq!(t.pus.len(), hwloc_count(&summary, "PU"), "{file} PUs");

        let osdevs = hwloc_osdevs(file).expect("hwloc-info osdev:all runs");
        let names = |kinds: &[&str]| -> BTreeSet<String> {
            osdevs
                .iter()
                .filter(|(_, k)| kinds.contains(&k.as_str()))
                .map(|(n, _)| n.clone())
                .collect()
        };
        // Every GPU/co-processor OS device belongs to exactly one of our GPUs (all
        // these files have them under display-class PCI devices), and every
        // network/OpenFabrics device to one of our NICs.
        let ours_gpu: BTreeSet<String> = t
            .gpus
            .iter()
            .flat_map(|g| g.os_devices.iter().map(|d| d.name.clone()))
            .collect();
        let ours_nic: BTreeSet<String> = t
            .nics
            .iter()
            .flat_map(|n| n.os_devices.iter().map(|d| d.name.clone()))
            .collect();
        assert_eq!(
            ours_gpu,
            names(&["GPU", "Co-Processor", "CoProc"]),
            "{file} GPU devices"
        );
        assert_eq!(
            ours_nic,
            names(&["Network", "OpenFabrics"]),
            "{file} NIC devices"
        );
    }
}

#[test]
fn io_details_wholeio() {
    let t = load("32em64t-2n8c2t-pci-wholeio.xml");
    let cuda = t.gpus.iter().find(|g| g.name == "cuda0").expect("cuda0");
    let pci = cuda.pci.as_ref().unwrap();
    assert_eq!(pci.bus_id, "0000:84:00.0");
    assert_eq!(pci.class_id, 0x0302);
    assert!(cuda.os_devices.iter().any(|d| d.name == "card0"));
    // Package 1 (PUs 8-15,24-31) holds the CUDA GPU and mlx5_0.
    let pkg1 = &t.packages[1];
    assert_eq!(pkg1.cpuset.to_string(), "8-15,24-31");
    assert_eq!(cuda.cpuset, pkg1.cpuset);
    assert_eq!(cuda.numa_nodes, vec![1]);
    let mlx = t.nics.iter().find(|n| n.name == "mlx5_0").expect("mlx5_0");
    assert_eq!(mlx.kind, NicKind::Fabric);
    assert_eq!(mlx.pci.as_ref().unwrap().bus_id, "0000:04:00.0");
    assert_eq!(mlx.cpuset, pkg1.cpuset);
    assert!(t
        .nics
        .iter()
        .filter(|n| n.name.starts_with("eth"))
        .all(|n| n.kind == NicKind::Ethernet));
    assert_eq!(t.numa_nodes[0].memory_bytes, 34_330_173_440);
    let summary = t.summary();
    assert!(
        summary.contains("cuda0, card0 [PCI 0000:84:00.0"),
        "{summary}"
    );
    assert!(summary.contains("ib0, mlx5_0"), "{summary}");
}

/// Properties every plan must have.
fn check_plan(t: &Topology, plan: &PlacementPlan, req: &PlacementRequest) {
    assert_eq!(plan.ranks.len(), req.ranks);
    let allowed = req
        .allowed
        .as_ref()
        .map_or(t.allowed.clone(), |a| a.intersection(&t.allowed));
    let mut seen: BTreeSet<u32> = BTreeSet::new();
    let mut clash = false;
    for p in &plan.ranks {
        assert_eq!(p.compute_cores.len(), req.threads);
        assert!(
            p.cpuset.is_subset(&allowed),
            "rank {} {} outside {}",
            p.rank,
            p.cpuset,
            allowed
        );
        assert!(!p.cpuset.is_empty());
        for c in p
            .compute_cores
            .iter()
            .chain(if plan.node_progress_cores.is_empty() {
                &p.progress_cores[..]
            } else {
                &[]
            })
        {
            clash |= !seen.insert(*c);
        }
    }
    for c in &plan.node_progress_cores {
        clash |= !seen.insert(*c);
    }
    assert_eq!(clash, plan.oversubscribed, "overlap iff oversubscribed");
}

fn shapes() -> Vec<PlacementRequest> {
    let mut v = Vec::new();
    for policy in [
        Policy::Compact,
        Policy::Spread,
        Policy::NumaPerRank,
        Policy::PackagePerRank,
    ] {
        for (ranks, threads, progress) in [
            (1, 1, 0),
            (2, 4, 1),
            (4, 2, 0),
            (3, 3, 1),
            (8, 1, 1),
            (64, 3, 0),
        ] {
            v.push(
                PlacementRequest::new(ranks, threads)
                    .progress(progress)
                    .policy(policy),
            );
            v.push(
                PlacementRequest::new(ranks, threads)
                    .per_node_progress(progress)
                    .policy(policy),
            );
        }
    }
    v
}

#[test]
fn placements_hold_properties_on_all_files() {
    for file in FILES {
        let t = load(file);
        for req in shapes() {
            let p = plan(&t, &req).unwrap();
            check_plan(&t, &p, &req);
        }
    }
}

#[test]
fn numa_local_when_possible() {
    let t = load("192em64t-24n8c2t.xml");
    // 24 ranks x 8 threads fill the machine; each rank gets exactly one NUMA node.
    for policy in [Policy::Compact, Policy::Spread, Policy::NumaPerRank] {
        let p = plan(&t, &PlacementRequest::new(24, 8).policy(policy)).unwrap();
        assert!(!p.oversubscribed);
        let mut numas = BTreeSet::new();
        for r in &p.ranks {
            let node = t.numa_node(r.numa.unwrap()).unwrap();
            assert!(
                r.cpuset.is_subset(&node.cpuset),
                "{policy:?} rank {} spans NUMA nodes",
                r.rank
            );
            numas.insert(node.os_index);
        }
        assert_eq!(numas.len(), 24);
    }
    // Spread: 4 ranks go to 4 different NUMA nodes.
    let p = plan(&t, &PlacementRequest::new(4, 4).policy(Policy::Spread)).unwrap();
    let numas: BTreeSet<_> = p.ranks.iter().map(|r| r.numa).collect();
    assert_eq!(numas.len(), 4);
}

#[test]
fn wholeio_devices_follow_package() {
    let t = load("32em64t-2n8c2t-pci-wholeio.xml");
    let pkg1 = t.packages[1].cpuset.clone();
    // Two ranks, one per package: the rank on package 1 gets cuda0 and mlx5_0 locally.
    for policy in [
        Policy::Compact,
        Policy::Spread,
        Policy::NumaPerRank,
        Policy::PackagePerRank,
    ] {
        let p = plan(&t, &PlacementRequest::new(2, 7).progress(1).policy(policy)).unwrap();
        let on_pkg1: Vec<_> = p
            .ranks
            .iter()
            .filter(|r| r.cpuset.is_subset(&pkg1))
            .collect();
        assert_eq!(on_pkg1.len(), 1, "{policy:?}");
        let r = on_pkg1[0];
        let gpu = r.gpu.as_ref().unwrap();
        assert_eq!(
            (gpu.name.as_str(), gpu.local, gpu.shared),
            ("cuda0", true, false),
            "{policy:?}"
        );
        assert_eq!(gpu.pci_bus_id.as_deref(), Some("0000:84:00.0"));
        let nic = r.nic.as_ref().unwrap();
        assert_eq!((nic.name.as_str(), nic.local), ("mlx5_0", true));
        // The other rank gets the remaining free GPU (not local) and shares mlx5_0.
        let other = p.ranks.iter().find(|x| x.rank != r.rank).unwrap();
        let g = other.gpu.as_ref().unwrap();
        assert!(!g.local && !g.shared && g.name != "cuda0");
        assert_eq!(other.nic.as_ref().unwrap().name, "mlx5_0");
        assert!(!other.nic.as_ref().unwrap().local);
    }
    // Four ranks: two GPUs, so GPUs are shared, local ones first.
    let p = plan(&t, &PlacementRequest::new(4, 4).policy(Policy::Compact)).unwrap();
    for r in &p.ranks {
        let g = r.gpu.as_ref().unwrap();
        assert!(g.shared);
        assert_eq!(g.local, r.cpuset.is_subset(&pkg1));
    }
}

#[test]
fn gpus_spread_before_shared() {
    let t = load("32em64t-2n8c2t-pci-wholeio.xml");
    // Both ranks on package 1: the two GPUs there go one to each rank.
    let allowed = t.packages[1].cpuset.clone();
    let p = plan(&t, &PlacementRequest::new(2, 4).allowed(allowed)).unwrap();
    let names: BTreeSet<_> = p
        .ranks
        .iter()
        .map(|r| r.gpu.as_ref().unwrap().name.clone())
        .collect();
    assert_eq!(names.len(), 2);
    assert!(p.ranks.iter().all(|r| r.gpu.as_ref().unwrap().local));
    assert_eq!(p.ranks[0].gpu.as_ref().unwrap().name, "cuda0");
}

#[test]
fn fabric_nic_preferred_on_24em64t() {
    let t = load("24em64t-2n6c2t-pci.xml");
    let p = plan(&t, &PlacementRequest::new(2, 6).policy(Policy::NumaPerRank)).unwrap();
    assert_eq!(p.ranks[0].nic.as_ref().unwrap().name, "mlx4_0");
    assert!(p.ranks[0].nic.as_ref().unwrap().local);
    assert_eq!(p.ranks[1].nic.as_ref().unwrap().name, "mlx4_0");
    assert!(!p.ranks[1].nic.as_ref().unwrap().local);
    assert!(p.ranks[0].gpu.is_none());
    // Interleaved PU numbering: package 0 has the even PUs.
    assert!(p.ranks[0].cpuset.iter().all(|c| c % 2 == 0));
}

#[test]
fn restricted_cpusets_respected() {
    let t = load("16amd64-8n2c-cpusets.xml");
    let allowed = CpuSet::parse_list("0-3,5-6,12-15").unwrap();
    assert_eq!(t.allowed, allowed);
    // Fill every allowed core.
    let p = plan(&t, &PlacementRequest::new(5, 2)).unwrap();
    assert!(!p.oversubscribed);
    let used: CpuSet = p
        .ranks
        .iter()
        .flat_map(|r| r.cpuset.iter().collect::<Vec<_>>())
        .collect();
    assert_eq!(used, allowed);
    // Further restriction through the request, including PUs that do not exist.
    let p = plan(
        &t,
        &PlacementRequest::new(2, 2).allowed(CpuSet::parse_list("2-11").unwrap()),
    )
    .unwrap();
    assert!(!p.oversubscribed);
    for r in &p.ranks {
        assert!(
            r.cpuset.is_subset(&CpuSet::parse_list("2-3,5-6").unwrap()),
            "{:?}",
            r.cpuset
        );
    }
    // One more thread than the four cores left: oversubscribed, still inside the set.
    let p = plan(
        &t,
        &PlacementRequest::new(5, 1).allowed(CpuSet::parse_list("2-11").unwrap()),
    )
    .unwrap();
    assert!(p.oversubscribed);
    assert!(p
        .ranks
        .iter()
        .all(|r| r.cpuset.is_subset(&CpuSet::parse_list("2-3,5-6").unwrap())));
}

#[test]
fn oversubscription_is_flagged_not_fatal() {
    let t = load("16em64t-4s2c2t.xml");
    let p = plan(&t, &PlacementRequest::new(4, 4).progress(1)).unwrap();
    assert!(p.oversubscribed);
    assert!(p.ranks.iter().all(|r| r.compute_cores.len() == 4));
    assert!(!p.warnings.is_empty());
    let cores_used: BTreeSet<u32> = p
        .ranks
        .iter()
        .flat_map(|r| r.compute_cores.clone())
        .collect();
    assert_eq!(cores_used.len(), 8, "all cores used before any is shared");
}

#[test]
fn errors_are_typed() {
    let t = load("16em64t-4s2c2t.xml");
    assert!(matches!(
        plan(&t, &PlacementRequest::new(0, 1)),
        Err(TopologyError::ZeroRanks)
    ));
    assert!(matches!(
        plan(&t, &PlacementRequest::new(1, 0)),
        Err(TopologyError::ZeroThreads)
    ));
    assert!(matches!(
        plan(
            &t,
            &PlacementRequest::new(1, 1).allowed(CpuSet::parse_list("100").unwrap())
        ),
        Err(TopologyError::NoAllowedCores { .. })
    ));
    assert!(matches!(
        Topology::from_xml_file("/nonexistent/x.xml"),
        Err(TopologyError::XmlFile { .. })
    ));
    let bad = std::env::temp_dir().join(format!("hpc-topology-bad-{}.xml", std::process::id()));
    std::fs::write(&bad, "<topology><oops").unwrap();
    let e = Topology::from_xml_file(&bad);
    std::fs::remove_file(&bad).ok();
    assert!(matches!(e, Err(TopologyError::XmlParse { .. })), "{e:?}");
    assert!(matches!(
        Topology::from_synthetic("pack:2 banana:3"),
        Err(TopologyError::BadSynthetic { .. })
    ));
    assert!(matches!(
        Topology::from_synthetic("pack:x"),
        Err(TopologyError::BadSynthetic { .. })
    ));
    assert!(matches!(
        "diagonal".parse::<Policy>(),
        Err(TopologyError::BadPolicy(_))
    ));
}

#[test]
fn json_has_schema_version_and_round_trips() {
    let t = load("32em64t-2n8c2t-pci-wholeio.xml");
    let p = plan(&t, &PlacementRequest::new(2, 7).progress(1)).unwrap();
    let json = p.to_json();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["ranks"][1]["gpu"]["name"], "cuda0");
    let back: PlacementPlan = serde_json::from_str(&json).unwrap();
    assert_eq!(back, p);
    let topo_json = serde_json::to_string(&t).unwrap();
    let back: Topology = serde_json::from_str(&topo_json).unwrap();
    assert_eq!(back, t);
}

#[test]
fn deterministic() {
    let t = load("192em64t-24n8c2t.xml");
    let req = PlacementRequest::new(64, 3)
        .per_node_progress(4)
        .policy(Policy::Spread);
    assert_eq!(plan(&t, &req).unwrap(), plan(&t, &req).unwrap());
}

/// An XML topology whose cpusets were all emptied: hwloc refuses it with errno
/// EINVAL, which the message once wrote in Rust's debug form ("failed with errno
/// Some(Errno { code: 22, description: Some(\"Invalid argument\") })"): it is
/// now in words.
#[test]
fn a_topology_hwloc_refuses_is_said_in_words() {
    let text = std::fs::read_to_string(data("16em64t-4s2c2t.xml")).unwrap();
    let mut emptied = String::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("cpuset=\"") {
        let (head, tail) = rest.split_at(at + "cpuset=\"".len());
        emptied.push_str(head);
        emptied.push_str("0x0");
        rest = &tail[tail.find('"').unwrap()..];
    }
    emptied.push_str(rest);
    let bad = std::env::temp_dir().join(format!("hpc-topology-empty-{}.xml", std::process::id()));
    std::fs::write(&bad, emptied).unwrap();
    let e = Topology::from_xml_file(&bad);
    std::fs::remove_file(&bad).ok();
    let text = match e {
        Err(e @ TopologyError::XmlParse { .. }) => e.to_string(),
        other => panic!("{other:?}"),
    };
    assert!(
        !text.contains("Some(") && !text.contains("Errno {"),
        "{text}"
    );
    assert!(
        text.contains("failed: Invalid argument (errno 22)"),
        "{text}"
    );
}

/// An XML file whose objects have a cpuset but no complete_cpuset (written by
/// hand: hwloc exports both) is refused with a typed error; hwloc 2.9 died
/// of a segmentation fault loading it, and the process with it.
#[test]
fn an_object_without_its_complete_cpuset_is_an_error_not_a_crash() {
    let bad = std::env::temp_dir().join(format!(
        "hpc-topology-nocomplete-{}.xml",
        std::process::id()
    ));
    std::fs::write(
        &bad,
        r#"<?xml version="1.0"?><!DOCTYPE topology SYSTEM "hwloc2.dtd"><topology version="2.0"><object type="Machine" os_index="0" cpuset="0x1"><object type="PU" os_index="0" cpuset="0x1"/></object></topology>"#,
    )
    .unwrap();
    let e = Topology::from_xml_file(&bad);
    std::fs::remove_file(&bad).ok();
    match e {
        Err(e @ TopologyError::XmlParse { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains("has a cpuset but no complete_cpuset"),
                "{text}"
            );
        }
        other => panic!("{other:?}"),
    }
}

/// A placement whose allowed CPUs have no core of the machine says which CPUs
/// were asked for and which the machine allows: it said "in the allowed cpuset "
/// and nothing more (the empty intersection). A CPU list of 100,000
/// characters is shown cut in its error, not echoed whole.
#[test]
fn allowed_cpus_with_no_core_are_named_and_long_lists_cut() {
    let t = Topology::from_synthetic("pack:1 core:2 pu:1").unwrap();
    for (asked, says) in [
        (
            CpuSet::parse_list("1000-2000").unwrap(),
            "CPUs \"1000-2000\"",
        ),
        (CpuSet::new(), "allows CPUs none"),
    ] {
        let e = plan(&t, &PlacementRequest::new(1, 1).allowed(asked)).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains(says) && msg.contains("\"0-1\""), "{msg}");
    }
    let long = vec!["0-100000"; 20_000].join(",");
    let e = CpuSet::parse_list(&long).unwrap_err().to_string();
    assert!(
        e.len() < 200 && e.contains("more characters"),
        "{} bytes: {}",
        e.len(),
        &e[..100]
    );
    let e = CpuSet::parse_list(&format!("{long}x"))
        .unwrap_err()
        .to_string();
    assert!(e.len() < 200, "{} bytes", e.len());
    // A policy and a synthetic description as well.
    let e = long
        .parse::<hpc_topology::Policy>()
        .unwrap_err()
        .to_string();
    assert!(
        e.len() < 200 && e.contains("more characters"),
        "{} bytes",
        e.len()
    );
    for desc in [format!("pack:{long}"), "pack:1000 ".repeat(10_000)] {
        let e = Topology::from_synthetic(&desc).unwrap_err().to_string();
        assert!(
            e.len() < 300 && e.contains("more characters"),
            "{} bytes",
            e.len()
        );
    }
}

/// A topology file larger than any machine's is refused by its size before
/// it is read (a sparse file of 2 GB was read whole, and again by hwloc,
/// 2 GB of memory and 14 s before hwloc refused it), and every refusal of
/// a file names it cut when its path is longer than any the system takes
/// (a path of 100,000 characters was quoted whole).
#[test]
fn a_topology_file_is_bounded_and_named_cut() {
    let big = std::env::temp_dir().join(format!("hpc-topology-big-{}.xml", std::process::id()));
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(hpc_topology::MAX_XML_BYTES + 1).unwrap();
    drop(f);
    let t0 = std::time::Instant::now();
    let e = Topology::from_xml_file(&big);
    std::fs::remove_file(&big).ok();
    assert!(
        matches!(&e, Err(TopologyError::XmlTooLarge { size, .. }) if *size == hpc_topology::MAX_XML_BYTES + 1),
        "{e:?}"
    );
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(2),
        "{:?}",
        t0.elapsed()
    );
    let e = e.unwrap_err().to_string();
    assert!(e.contains(&big.display().to_string()), "{e}");
    let long = std::env::temp_dir().join("x".repeat(100_000));
    let e = Topology::from_xml_file(&long).unwrap_err().to_string();
    assert!(
        e.len() < 1000 && e.contains("more characters"),
        "{} bytes: {e:.200}",
        e.len()
    );
}

/// A hand-edited XML whose PU's os_index is not the one bit of its cpuset (a
/// duplicated os_index, one of `u32::MAX`), or whose NUMA node's is not its
/// nodeset's, is refused with a typed error naming the object: hwloc's check
/// of the loaded topology asserted it and aborted the process ("Assertion
/// `hwloc_bitmap_first(obj->cpuset) == (int) obj->os_index' failed", a
/// debug build). The files hwloc exports load as before.
#[test]
fn an_os_index_that_is_not_its_objects_set_is_an_error_not_an_abort() {
    let good = std::fs::read_to_string(data("16em64t-4s2c2t.xml")).unwrap();
    let dir = hpc_test_support::TmpDir::new("hpc-topology", "osindex");
    let pu8 = r#"os_index="8" cpuset="0x00000100""#;
    let numa = r#"type="NUMANode" os_index="0""#;
    for (name, text, said) in [
        (
            "dup",
            good.replacen(pu8, r#"os_index="0" cpuset="0x00000100""#, 1),
            "has os_index 0 but cpuset 0x00000100",
        ),
        (
            "max",
            good.replacen(pu8, r#"os_index="4294967295" cpuset="0x00000100""#, 1),
            "has os_index 4294967295",
        ),
        (
            "numa",
            good.replacen(numa, r#"type="NUMANode" os_index="1""#, 1),
            "(type NUMANode) has os_index 1 but nodeset 0x00000001",
        ),
    ] {
        assert_ne!(text, good, "{name}: the edit took");
        let file = dir.join(format!("{name}.xml"));
        std::fs::write(&file, text).unwrap();
        match Topology::from_xml_file(&file) {
            Err(e @ TopologyError::XmlParse { .. }) => {
                assert!(e.to_string().contains(said), "{name}: {e}")
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    for file in FILES {
        load(file);
    }
}

/// Hand edits of a real topology that hwloc's check of a loaded topology
/// (which hwlocality runs in every debug build) aborted on, the process
/// with it ("topology.c:4708: hwloc__check_children_cpusets: Assertion
/// `hwloc_bitmap_isequal(set, obj->cpuset)' failed.", SIGABRT): a package's
/// cpuset with a CPU no child has, a core emptied of its PUs, a core's
/// cpuset emptied, a PU inside a PU, two PUs of one CPU. Each is refused by
/// name before hwloc loads it (part E of pass 19); the real files still load.
#[test]
fn a_tree_whose_sets_do_not_add_up_is_an_error_not_an_abort() {
    let good = std::fs::read_to_string(data("16em64t-4s2c2t.xml")).unwrap();
    let dir = hpc_test_support::TmpDir::new("hpc-topology", "sets");
    let pu0 = r#"<object type="PU" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="8"/>"#;
    let pu8 = r#"<object type="PU" os_index="8" cpuset="0x00000100" complete_cpuset="0x00000100" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="9"/>"#;
    let pus = format!("{pu0}\n              {pu8}");
    let core0 = r#"type="Core" os_index="0" cpuset="0x00000101" complete_cpuset="0x00000101""#;
    let pkg0 = r#"type="Package" os_index="0" cpuset="0x00001111" complete_cpuset="0x00001111""#;
    for (name, text, said) in [
        (
            "package",
            good.replacen(pkg0, &pkg0.replace("1111", "1113"), 1),
            "object 2 (type Package) has cpuset 0x00001113 but its children's cpusets make \
             0x00001111",
        ),
        (
            "no-pu",
            good.replacen(&pus, "", 1),
            "object 6 (type Core) has cpuset 0x00000101 but its children's cpusets make 0x0",
        ),
        (
            "core-empty",
            good.replacen(core0, &core0.replace("0x00000101", "0x00000000"), 1),
            "object 6 (type Core) has cpuset 0x0 but its children's cpusets make 0x00000101",
        ),
        (
            "pu-in-pu",
            good.replacen(
                &pus,
                &format!("{}>{pu8}</object>", pu0.trim_end_matches("/>")),
                1,
            ),
            // Refused at the inner PU's tag, before the core's sets are added
            // up (pass 20: a PU holds no PU).
            "object 8 (type PU) is a child of object 7 (type PU)",
        ),
        (
            "two-pus-of-one-cpu",
            good.replacen(
                pu8,
                &pu8.replace(
                    r#"os_index="8" cpuset="0x00000100" complete_cpuset="0x00000100""#,
                    r#"os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001""#,
                ),
                1,
            ),
            "object 8 (type PU) has cpuset 0x00000001, which overlaps an earlier sibling's \
             under object 6 (type Core)",
        ),
    ] {
        assert_ne!(text, good, "{name}: the edit took");
        let file = dir.join(format!("{name}.xml"));
        std::fs::write(&file, text).unwrap();
        match Topology::from_xml_file(&file) {
            Err(e @ TopologyError::XmlParse { .. }) => {
                assert!(e.to_string().contains(said), "{name}: {e}")
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    for file in FILES {
        load(file);
    }
}

/// Hand edits beyond the sets' partition that hwloc's check of a loaded
/// topology still aborted a debug build on (pass 19's leftover: duplicated
/// `gp_index`, levels out of order, nodesets): "Assertion
/// `!hwloc_bitmap_isset(gp_indexes, obj->gp_index)' failed" for a PU given
/// its core's `gp_index` (also written `08`, ` 8`, `8x`, which hwloc reads
/// as 8), or the machine's for a Misc under a PU; "… `hwloc_get_depth_type(
/// topology, j) != HWLOC_OBJ_PU' …" for a PU inside a PU, or a core with
/// its PU inside a PU; "… `hwloc_bitmap_isincluded(obj->cpuset,
/// obj->complete_cpuset)' …" for a core's or a PU's complete set smaller
/// than its set. Each is refused by name before hwloc loads it. Tried and
/// left to hwloc (it loads them or refuses them itself): a `gp_index` of 0,
/// `-1`, `x` or absent, a Misc or a NUMA node under a PU, a Group under an
/// L1 cache, a Die, Machine or Package where the core was, a memory-side
/// cache, two NUMA nodes of one node (refused by the os_index scan), a
/// package's nodeset of two nodes, an object's nodeset beyond its complete
/// one, caches out of order and of depth 7, an unknown type.
#[test]
fn ids_levels_and_complete_sets_hwloc_aborts_on_are_errors() {
    let good = std::fs::read_to_string(data("16em64t-4s2c2t.xml")).unwrap();
    let dir = hpc_test_support::TmpDir::new("hpc-topology", "ids-levels");
    let pu0 = r#"<object type="PU" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="8"/>"#;
    let open_pu0 = pu0.trim_end_matches("/>");
    let pu = |gp: &str| {
        format!(
            r#"<object type="PU" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="{gp}"/>"#
        )
    };
    let core0 = r#"cpuset="0x00000101" complete_cpuset="0x00000101" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="7">"#;
    let mut cases = vec![];
    for gp in ["8", "08", " 8", "8x"] {
        cases.push((
            format!("gp-index-{gp}"),
            good.replacen(r#"gp_index="9""#, &format!(r#"gp_index="{gp}""#), 1),
            "object 8 (type PU) has gp_index 8, as object 7 has".to_string(),
        ));
    }
    cases.extend([
        (
            "gp-index-of-a-misc".to_string(),
            good.replacen(
                pu0,
                &format!(r#"{open_pu0}><object type="Misc" name="m" gp_index="1"/></object>"#),
                1,
            ),
            "object 8 (type Misc) has gp_index 1, as object 0 has".to_string(),
        ),
        (
            "pu-in-pu".to_string(),
            good.replacen(pu0, &format!("{open_pu0}>{}</object>", pu("901")), 1),
            "object 8 (type PU) is a child of object 7 (type PU)".to_string(),
        ),
        (
            "core-in-pu".to_string(),
            good.replacen(
                pu0,
                &format!(
                    r#"{open_pu0}><object type="Core" os_index="9" cpuset="0x00000001" complete_cpuset="0x00000001" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="900">{}</object></object>"#,
                    pu("901")
                ),
                1,
            ),
            "object 8 (type Core) is a child of object 7 (type PU)".to_string(),
        ),
        (
            "core-complete-smaller".to_string(),
            good.replacen(
                core0,
                &core0.replace(
                    r#"complete_cpuset="0x00000101""#,
                    r#"complete_cpuset="0x00000001""#,
                ),
                1,
            ),
            "object 6 (type Core) has cpuset 0x00000101 beyond its complete_cpuset 0x00000001"
                .to_string(),
        ),
        (
            "pu-complete-empty".to_string(),
            good.replacen(
                pu0,
                &pu0.replace(r#"complete_cpuset="0x00000001""#, r#"complete_cpuset="0x0""#),
                1,
            ),
            "object 7 (type PU) has cpuset 0x00000001 beyond its complete_cpuset 0x0".to_string(),
        ),
    ]);
    for (name, text, said) in cases {
        assert_ne!(text, good, "{name}: the edit took");
        let file = dir.join(format!("{name}.xml"));
        std::fs::write(&file, text).unwrap();
        match Topology::from_xml_file(&file) {
            Err(e @ TopologyError::XmlParse { .. }) => {
                assert!(e.to_string().contains(&said), "{name}: {e}")
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    // What hwloc loads as it is: a gp_index it replaces (0) or reads as
    // another (-1 wraps), a Misc under a PU.
    for (name, text) in [
        (
            "gp-index-0",
            good.replacen(r#"gp_index="9""#, r#"gp_index="0""#, 1),
        ),
        (
            "gp-index-minus-1",
            good.replacen(r#"gp_index="9""#, r#"gp_index="-1""#, 1),
        ),
        (
            "misc-in-pu",
            good.replacen(
                pu0,
                &format!(r#"{open_pu0}><object type="Misc" name="m" gp_index="900"/></object>"#),
                1,
            ),
        ),
    ] {
        assert_ne!(text, good, "{name}: the edit took");
        let file = dir.join(format!("{name}.xml"));
        std::fs::write(&file, text).unwrap();
        let t = Topology::from_xml_file(&file).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(t.pus.len(), 16, "{name}");
    }
}

/// A topology file named with a line break, a terminal's escape and a
/// right-to-left override is shown quoted and escaped where hwloc's reason
/// names it again (it was written raw, after the escaped path of the
/// message: pass 18's leftover) and in a loaded topology's summary (its
/// first line, "Topology of XML file …", wrote it raw).
#[test]
fn hwlocs_reason_and_the_summary_show_an_odd_path_escaped() {
    let dir = hpc_test_support::TmpDir::new("hpc-topology", "oddname");
    let bad = dir.join("t\n\u{1b}[2Jx\u{202e}lmx.xml");
    std::fs::write(&bad, "<<<not xml").unwrap();
    let e = Topology::from_xml_file(&bad).unwrap_err().to_string();
    let good = dir.join("g\n\u{1b}[2J\u{202e}.xml");
    std::fs::copy(data("16em64t-4s2c2t.xml"), &good).unwrap();
    let summary = Topology::from_xml_file(&good).map(|t| t.summary());
    std::fs::remove_dir_all(&dir).ok();
    let raw = |c: char| c == '\u{1b}' || c == '\u{202e}';
    assert!(!e.contains(raw) && !e.contains('\n'), "{e:?}");
    // Named once, escaped: hwloc is given the text read, and its reason no
    // longer names the file again.
    assert_eq!(
        e.matches(r#"t\n\u{1b}[2Jx\u{202e}lmx.xml""#).count(),
        1,
        "{e}"
    );
    let summary = summary.unwrap();
    assert!(!summary.contains(raw), "{summary:?}");
    assert!(
        summary.starts_with("Topology of XML file \"")
            && summary.contains(r#"/g\n\u{1b}[2J\u{202e}.xml""#),
        "{summary}"
    );
}

/// An XML topology whose file name is not UTF-8 (a name Linux allows): hwloc's
/// binding refused the name, and the file was said to be "not a valid hwloc XML
/// topology: hwloc file paths can't contain non-Unicode data" (`hpc topo
/// --input`, 2). It loads from the text read and checked, and its source goes
/// through JSON (`hpc topo --json`) with the name's bytes.
#[test]
fn an_xml_file_whose_name_is_not_utf8_loads() {
    use std::os::unix::ffi::OsStrExt as _;
    let dir = hpc_test_support::TmpDir::new("hpc-topology", "odd-name");
    let odd = dir.join(std::ffi::OsStr::from_bytes(b"n\xff.xml"));
    std::fs::copy(data("24em64t-2n6c2t-pci.xml"), &odd).unwrap();
    let topo = Topology::from_xml_file(&odd).unwrap_or_else(|e| panic!("{e}"));
    let mut expected = load("24em64t-2n6c2t-pci.xml");
    expected.source = topo.source.clone();
    assert_eq!(topo, expected);
    let doc = serde_json::json!({ "topology": topo });
    let back: Topology = serde_json::from_value(doc["topology"].clone()).unwrap();
    assert_eq!(back.source, hpc_topology::TopologySource::Xml(odd));
}
