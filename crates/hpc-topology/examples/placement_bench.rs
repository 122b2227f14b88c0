//! Times topology load + placement of 64 ranks on the 192-core XML topology:
//! `cargo run --release -p hpc-topology --example placement_bench`.

use std::time::Instant;

use hpc_topology::{plan, PlacementRequest, Policy, Topology};

fn main() {
    let xml = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/192em64t-24n8c2t.xml"
    );
    let iterations = 20;
    let mut load_total = 0.0;
    let mut plan_total = 0.0;
    for _ in 0..iterations {
        let t0 = Instant::now();
        let topo = Topology::from_xml_file(xml).expect("load");
        let t1 = Instant::now();
        let req = PlacementRequest::new(64, 3)
            .per_node_progress(4)
            .policy(Policy::Spread);
        let p = plan(&topo, &req).expect("plan");
        let t2 = Instant::now();
        assert_eq!(p.ranks.len(), 64);
        load_total += (t1 - t0).as_secs_f64();
        plan_total += (t2 - t1).as_secs_f64();
    }
    let load = load_total / iterations as f64 * 1e3;
    let place = plan_total / iterations as f64 * 1e3;
    println!(
        "192em64t-24n8c2t.xml, 64 ranks x 3 threads + 4 node progress cores (spread), mean of {iterations}: \
         load {load:.2} ms, placement {place:.2} ms, total {:.2} ms",
        load + place
    );
}
