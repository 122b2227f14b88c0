//! Prints the summary of a topology: `cargo run --example show -- [FILE.xml|SYNTHETIC]`.
fn main() {
    let arg = std::env::args().nth(1);
    let topo = match arg {
        None => hpc_topology::Topology::this_machine(),
        Some(a) if a.ends_with(".xml") => hpc_topology::Topology::from_xml_file(a),
        Some(a) => hpc_topology::Topology::from_synthetic(&a),
    }
    .expect("topology");
    print!("{}", topo.summary());
}
