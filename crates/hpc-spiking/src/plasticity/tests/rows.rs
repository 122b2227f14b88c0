//! Rows (a source's synapses onto many targets, and the rows of the sources
//! present on a shard) and a step's spikes taken in, against single
//! synapses and the reference of the parent module.

use super::*;

/// A row keeps its targets in the order of connection, whatever that order
/// (ascending, a repeated target, a jump beyond a `u16`, a step back), and
/// delivers to exactly those; connected in ascending order with small steps it
/// takes `BYTES_PER_SYNAPSE` a synapse.
#[test]
fn targets_in_any_order_are_delivered_as_connected() {
    let r = rule(15.0, 0.1, 0.0513, 0.4);
    let targets = [2u32, 2, 9, 70_001, 70_002, 1, 0, 100_000];
    let mut archives: Vec<PostArchive> = (0..100_001)
        .map(|_| PostArchive::new(30.0, 1.5).unwrap())
        .collect();
    let mut row = StdpRow::new(1.5).unwrap();
    for (k, &t) in targets.iter().enumerate() {
        row.connect(t, 40.0 + k as f64, &mut archives).unwrap();
    }
    assert_eq!(row.targets().len(), targets.len());
    assert_eq!(row.targets().collect::<Vec<_>>(), targets);
    archives[9].record_post_spike(2.0).unwrap();
    archives[70_001].record_post_spike(2.0).unwrap();
    let got: Vec<(u32, f64)> = row.deliver(&r, 5.0, &mut archives).unwrap().collect();
    assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), targets);
    // The targets that fired were depressed (the first presynaptic spike has
    // no earlier one to pair with), the others kept their weight.
    for (k, &(t, w)) in got.iter().enumerate() {
        let w0 = 40.0 + k as f64;
        assert_eq!(w < w0, t == 9 || t == 70_001, "target {t}: {w} from {w0}");
        assert!(w <= w0, "target {t}: {w} from {w0}");
    }

    let mut sorted = StdpRow::new(1.5).unwrap();
    sorted.reserve(1000);
    for t in 0..1000u32 {
        sorted
            .connect(t * 100 % 100_000, 45.0, &mut archives)
            .unwrap();
    }
    let heap = sorted.bytes() - std::mem::size_of::<StdpRow>();
    assert_eq!(heap, 1000 * StdpRow::BYTES_PER_SYNAPSE);
    // The other row paid 4 more bytes for each of its four escapes (the jumps
    // to 70,001 and 100,000, the steps back to 1 and 0).
    let mut shrunk = row.clone();
    shrunk.shrink_to_fit();
    let heap = shrunk.bytes() - std::mem::size_of::<StdpRow>();
    assert_eq!(heap, targets.len() * StdpRow::BYTES_PER_SYNAPSE + 4 * 4);
}

/// Sources of one delay firing in the same steps read each target's `K-` from
/// its per-step cache and the lags from the memo: every weight must still be
/// the all-to-all reference's, and `deliver_into` must add exactly the
/// weights that `deliver` answers.
#[test]
fn rows_of_one_delay_in_the_same_steps_match_the_reference() {
    let p = benchmark_params();
    let r = StdpPlHom::new(p).unwrap();
    let (tau_minus, d) = (30.0, 1.5);
    // A 1 ms grid at high rates: sources often fire in the same step.
    let coarse = |ts: Vec<f64>| -> Vec<f64> {
        let mut out: Vec<f64> = ts.iter().map(|t| (t * 2.0).round()).collect();
        out.retain(|&t| t > 0.0);
        out.dedup();
        out
    };
    let pres: Vec<Vec<f64>> = (0..6)
        .map(|i| coarse(poisson(30 + i, 150.0, 1, 20_000)))
        .collect();
    let posts: Vec<Vec<f64>> = (0..3)
        .map(|j| coarse(poisson(40 + j, 80.0, 1, 20_000)))
        .collect();
    let mut archives: Vec<PostArchive> = (0..3)
        .map(|_| PostArchive::new(tau_minus, d).unwrap())
        .collect();
    let w0 = [45.0, 30.0, 60.0];
    let mut rows: Vec<StdpRow> = (0..6).map(|_| StdpRow::new(d).unwrap()).collect();
    for row in rows.iter_mut() {
        for (j, &w) in w0.iter().enumerate() {
            row.connect(j as u32, w, &mut archives).unwrap();
        }
    }
    let events = in_time_order(&pres);
    let mut next = [0usize; 3];
    let mut got: Vec<Vec<[f64; 3]>> = vec![Vec::new(); 6];
    let mut shared = 0;
    for (k, &(t, i)) in events.iter().enumerate() {
        for j in 0..3 {
            while next[j] < posts[j].len() && posts[j][next[j]] <= t - d {
                archives[j].record_post_spike(posts[j][next[j]]).unwrap();
                next[j] += 1;
            }
        }
        shared += usize::from(k > 0 && events[k - 1].0 == t);
        // Half of the rows through deliver_into, onto an input that holds 1.
        let w: Vec<f64> = if i % 2 == 0 {
            let mut input = [1.0; 3];
            rows[i]
                .deliver_into(&r, t, &mut archives, &mut input)
                .unwrap();
            let w = rows[i].weights().to_vec();
            assert_eq!(
                input.to_vec(),
                w.iter().map(|w| 1.0 + w).collect::<Vec<_>>()
            );
            w
        } else {
            rows[i]
                .deliver(&r, t, &mut archives)
                .unwrap()
                .map(|(_, w)| w)
                .collect()
        };
        got[i].push([w[0], w[1], w[2]]);
    }
    assert!(
        shared > 100,
        "only {shared} spikes shared a step with another"
    );
    for i in 0..6 {
        for j in 0..3 {
            let want = reference(&p, tau_minus, d, w0[j], &pres[i], &posts[j]);
            let g: Vec<f64> = got[i].iter().map(|w| w[j]).collect();
            assert_close(&g, &want, 1e-12, &format!("source {i} target {j}"));
        }
    }
    // An input shorter than the targets is refused before anything changes.
    let before = rows[0].weights().to_vec();
    let t = rows[0].t_last() + 1.0;
    assert_eq!(
        rows[0].deliver_into(&r, t, &mut archives, &mut [0.0; 2]),
        Err(ModelError::Target { target: 2, len: 2 })
    );
    assert_eq!(rows[0].weights(), &before[..]);
}

/// The cached `K-` of a time is cleared by a new spike and by a restore.
#[test]
fn the_cached_trace_follows_new_spikes_and_restores() {
    let mut a = PostArchive::new(30.0, 1.5).unwrap();
    let mut row = StdpRow::new(1.5).unwrap();
    row.connect(0, 45.0, std::slice::from_mut(&mut a)).unwrap();
    a.record_post_spike(1.0).unwrap();
    assert_eq!(a.k_minus_before_cached(10.0), a.k_minus_before(10.0));
    a.record_post_spike(4.0).unwrap();
    let k = a.k_minus_before(10.0);
    assert_eq!(a.k_minus_before_cached(10.0), k);
    assert!(k > (-6.0f64 / 30.0).exp(), "{k}");
    a.restore(0.0, 4.0, &[]).unwrap();
    assert_eq!(a.k_minus_before_cached(10.0), 0.0);
}

/// The reads of a step's newest spike, which the archive adds to its count
/// only when the step or the archive changes, are in a checkpoint taken in
/// the step and let the spike go when the next one is recorded.
#[test]
fn reads_of_a_step_are_counted_and_let_spikes_go() {
    let r = rule(15.0, 0.1, 0.0513, 0.4);
    let d = 1.0;
    let mut a = vec![PostArchive::new(30.0, d).unwrap()];
    let mut rows = [StdpRow::new(d).unwrap(), StdpRow::new(d).unwrap()];
    for row in &mut rows {
        row.connect(0, 45.0, &mut a).unwrap();
    }
    a[0].record_post_spike(2.0).unwrap();
    a[0].record_post_spike(3.0).unwrap();
    let reads = |a: &PostArchive| a.archived_spikes().map(|s| s.reads).collect::<Vec<_>>();
    let times = |a: &PostArchive| a.archived_spikes().map(|s| s.t).collect::<Vec<_>>();
    // Both rows spike at 5: the window (-1, 4] holds both spikes.
    rows[0].deliver(&r, 5.0, &mut a).unwrap().for_each(drop);
    assert_eq!(reads(&a[0]), [1, 1]);
    rows[1].deliver(&r, 5.0, &mut a).unwrap().for_each(drop);
    assert_eq!(reads(&a[0]), [2, 2]);
    // Read by both and more than 2 ms (max + min delay) before the next:
    // the spike at 2 goes at 5.5, the one at 3 at 8.
    a[0].record_post_spike(5.5).unwrap();
    assert_eq!(times(&a[0]), [3.0, 5.5]);
    assert_eq!(reads(&a[0]), [2, 0]);
    a[0].record_post_spike(8.0).unwrap();
    assert_eq!(times(&a[0]), [5.5, 8.0]);
    // Row 0 alone reads 5.5 (window (4, 9]; 8 is the step's newest): 5.5
    // stays until row 1 has read it too.
    rows[0].deliver(&r, 10.0, &mut a).unwrap().for_each(drop);
    assert_eq!(reads(&a[0]), [1, 1]);
    a[0].record_post_spike(11.0).unwrap();
    assert_eq!(times(&a[0]), [5.5, 8.0, 11.0]);
    rows[1].deliver(&r, 12.5, &mut a).unwrap().for_each(drop);
    assert_eq!(reads(&a[0]), [2, 2, 1]);
    a[0].record_post_spike(14.0).unwrap();
    assert_eq!(times(&a[0]), [11.0, 14.0]);
}

/// [`StdpRows`] holds rows only for the sources with a synapse, and delivers
/// each as the same [`StdpRow`] would: every weight, every input and every
/// trace the same double, on a grid where sources and targets often fire in
/// the same step (the memo and the cached `K-`), with sources that have no
/// row firing too; the traces kept once in [`SourceTraces`] are the ones
/// every single row keeps, and [`SourceTrace::spike`] keeps a source's trace
/// where it has no row.
#[test]
fn rows_of_present_sources_deliver_as_single_rows_do() {
    let r = rule(15.0, 0.1, 0.0513, 0.4);
    let (tau_minus, d, n_targets, n_sources) = (30.0, 1.5, 40u32, 5_000u32);
    let archives = || -> Vec<PostArchive> {
        (0..n_targets)
            .map(|_| PostArchive::new(tau_minus, d).unwrap())
            .collect()
    };
    let (mut a_row, mut a_rows) = (archives(), archives());
    // 25 present sources spread over 5,000, of 1 to 30 synapses each (targets
    // ascending, multapses included), connected target by target as a
    // network is.
    let key = crate::rng::stream_key(3, crate::rng::Purpose::Connect, 0);
    let mut k = 0u64;
    let mut next = |m: u32| {
        k += 1;
        crate::rng::below(crate::rng::draw(key, k), m)
    };
    let present: Vec<u32> = (0..25).map(|i| i * 197 + next(197)).collect();
    let mut synapses: Vec<(u32, u32)> = Vec::new();
    for t in 0..n_targets {
        for &s in &present {
            for _ in 0..next(3) {
                synapses.push((s, t));
            }
        }
    }
    let mut single: Vec<StdpRow> = (0..n_sources).map(|_| StdpRow::new(d).unwrap()).collect();
    let mut marks = crate::targets::IndexBuilder::new(n_sources);
    synapses.iter().for_each(|&(s, _)| marks.mark(s));
    let mut counter = crate::targets::ListCounter::new(marks.finish());
    synapses.iter().for_each(|&(s, t)| counter.count(s, t));
    let mut filler = StdpRowsFiller::new(d, counter).unwrap();
    for (i, &(s, t)) in synapses.iter().enumerate() {
        let w = 40.0 + (i % 7) as f64;
        single[s as usize].connect(t, w, &mut a_row).unwrap();
        filler.connect(s, t, w, &mut a_rows).unwrap();
    }
    let mut rows = filler.finish();
    let mut traces = SourceTraces::new(rows.index().clone());
    let p_count = rows.index().len();
    assert!(p_count > 15 && p_count <= 25, "{p_count} present");
    assert_eq!(rows.len(), synapses.len());
    // Allocated: the index, two u32 offsets and a trace a present source,
    // one more offset of each, 2 bytes a target and 8 a weight, and the memo.
    assert_eq!(
        rows.bytes(),
        crate::targets::SourceIndex::bytes_for(n_sources)
            + p_count * ROW_HEAD_BYTES
            + 8
            + synapses.len() * StdpRow::BYTES_PER_SYNAPSE
            + DELIVERY_MEMO_BYTES
    );
    assert_eq!(
        traces.bytes(),
        crate::targets::SourceIndex::bytes_for(n_sources) + p_count * 16
    );
    // Some absent sources fire too; a source's own trace follows all spikes.
    let firing: Vec<u32> = present.iter().copied().chain([0, 1, 4_999]).collect();
    let mut own = vec![SourceTrace::default(); firing.len()];
    let (mut in_row, mut in_rows) = (vec![0.0; n_targets as usize], vec![0.0; n_targets as usize]);
    let mut windows = 0;
    for step in 1..4_000u32 {
        let t = step as f64 * 0.5;
        for j in 0..n_targets as usize {
            if next(20) == 0 {
                a_row[j].record_post_spike(t).unwrap();
                a_rows[j].record_post_spike(t).unwrap();
            }
        }
        for (i, &s) in firing.iter().enumerate() {
            if next(10) != 0 {
                continue;
            }
            let before_own = own[i];
            own[i].spike(&r, t).unwrap();
            let had = single[s as usize].len();
            single[s as usize]
                .deliver_into(&r, t, &mut a_row, &mut in_row)
                .unwrap();
            let before = traces.spike(s, &r, t).unwrap();
            assert_eq!(before.is_some(), had > 0, "source {s}");
            if let Some(b) = before {
                assert_eq!(b, before_own, "source {s} at {t} ms");
            }
            let held = rows
                .deliver_into(
                    s,
                    &r,
                    &before.unwrap_or_default(),
                    t,
                    &mut a_rows,
                    &mut in_rows,
                )
                .unwrap();
            assert_eq!(held, had > 0, "source {s}");
            windows += usize::from(had > 0);
            let want = single[s as usize].weights();
            match rows.index().get(s) {
                Some(p) => {
                    let got = rows.weights(p);
                    assert!(
                        got.iter()
                            .zip(want)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "source {s} at {t} ms"
                    );
                    assert_eq!(
                        rows.targets(p).collect::<Vec<_>>(),
                        single[s as usize].targets().collect::<Vec<_>>()
                    );
                    let tr = traces.get(s).unwrap();
                    assert_eq!(
                        (tr.k_plus(), tr.t_last()),
                        (own[i].k_plus(), own[i].t_last())
                    );
                }
                None => assert!(want.is_empty()),
            }
            let row = &single[s as usize];
            assert_eq!(
                (row.k_plus(), row.t_last()),
                (own[i].k_plus(), own[i].t_last())
            );
        }
    }
    assert!(windows > 1_000, "{windows} deliveries");
    assert!(in_row
        .iter()
        .zip(&in_rows)
        .all(|(a, b)| a.to_bits() == b.to_bits()));
    // The initial weights are whole numbers.
    let moved = rows
        .all_weights()
        .iter()
        .filter(|&&w| w.fract() != 0.0)
        .count();
    assert!(moved > rows.len() / 2, "only {moved} weights moved");
    refusals_and_restores(
        rows,
        traces,
        &r,
        present[0],
        &mut a_rows,
        &mut in_rows,
        n_sources,
    );
}

/// The end of `rows_of_present_sources_deliver_as_single_rows_do`: a
/// spike out of order and inputs too short for the targets are refused, and
/// a checkpoint's weights and traces go back in, bad values refused.
fn refusals_and_restores(
    mut rows: StdpRows,
    mut traces: SourceTraces,
    r: &StdpPlHom,
    s: u32,
    a_rows: &mut [PostArchive],
    in_rows: &mut [f64],
    n_sources: u32,
) {
    // Out of order, and inputs too short for the targets, are refused.
    let now = traces.get(s).unwrap();
    let t_last = now.t_last();
    assert!(matches!(
        rows.deliver_into(s, r, &now, t_last, a_rows, in_rows),
        Err(ModelError::TimeOrder { .. })
    ));
    assert!(matches!(
        traces.spike(s, r, t_last),
        Err(ModelError::TimeOrder { .. })
    ));
    assert_eq!(
        traces.get(s),
        Some(now),
        "a refused spike changed the trace"
    );
    assert!(matches!(
        rows.deliver_into(s, r, &now, t_last + 1.0, a_rows, &mut [0.0; 3]),
        Err(ModelError::Target { len: 3, .. })
    ));
    // A checkpoint's state goes back in; bad values are refused.
    let mut copy = rows.clone();
    copy.restore_weights(rows.all_weights()).unwrap();
    assert!(copy.restore_weights(&[45.0]).is_err());
    let mut bad = rows.all_weights().to_vec();
    bad[3] = -1.0;
    assert!(copy.restore_weights(&bad).is_err());
    assert_eq!(copy.all_weights(), rows.all_weights());
    let tr = SourceTrace::restore(2.5, 7.0).unwrap();
    let mut kept = traces.clone();
    assert!(kept.restore(s, tr));
    assert_eq!(kept.get(s), Some(tr));
    // A source without a row has no trace here: skipped.
    let absent = (0..n_sources)
        .find(|&x| rows.index().get(x).is_none())
        .unwrap();
    assert!(!kept.restore(absent, tr));
    assert_eq!(kept.get(absent), None);
    assert!(SourceTrace::restore(-1.0, 7.0).is_err());
    assert!(SourceTrace::restore(1.0, f64::INFINITY).is_err());
}

/// [`SourceTraces::spike_step`] takes a step's spikes in as [`SourceTraces::spike`]
/// takes them one by one, in one part or several on a pool (the same
/// doubles), and refuses unsorted sources or a `before` of another length
/// before changing anything.
#[test]
fn a_step_taken_in_by_parts_is_the_spikes_taken_in_one_by_one() {
    let r = rule(15.0, 0.1, 0.0513, 0.4);
    let n_sources = 60_000u32;
    let key = crate::rng::stream_key(5, crate::rng::Purpose::Connect, 1);
    let mut k = 0u64;
    let mut next = |m: u32| {
        k += 1;
        crate::rng::below(crate::rng::draw(key, k), m)
    };
    let mut marks = crate::targets::IndexBuilder::new(n_sources);
    for s in 0..n_sources {
        if next(3) != 0 {
            marks.mark(s);
        }
    }
    let index = marks.finish();
    let (mut one, mut serial, mut parallel) = (
        SourceTraces::new(index.clone()),
        SourceTraces::new(index.clone()),
        SourceTraces::new(index),
    );
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(4)
        .build()
        .unwrap();
    let mut parallel_steps = 0;
    for step in 1..40u32 {
        let t = step as f64 * 0.1;
        // Each source spikes in a step with probability 1/4 (15,000 spikes,
        // some absent), as codes with the step above the source's bits.
        let codes: Vec<u32> = (0..n_sources)
            .filter(|_| next(4) == 0)
            .map(|s| (step << 16 << 8) | s)
            .collect();
        let source_of = |c: u32| c & 0xFF_FFFF;
        let want: Vec<SourceTrace> = codes
            .iter()
            .map(|&c| one.spike(source_of(c), &r, t).unwrap().unwrap_or_default())
            .collect();
        let mut got = vec![SourceTrace::default(); codes.len()];
        serial
            .spike_step(&r, t, &codes, source_of, &mut got, 1)
            .unwrap();
        assert_eq!(got, want, "step {step}, one part");
        let mut got = vec![SourceTrace::restore(9.0, 0.0).unwrap(); codes.len()];
        pool.install(|| parallel.spike_step(&r, t, &codes, source_of, &mut got, 4))
            .unwrap();
        assert_eq!(got, want, "step {step}, four parts");
        parallel_steps += usize::from(codes.len() >= PARALLEL_SPIKES);
    }
    assert!(parallel_steps > 30, "{parallel_steps} steps split");
    assert_eq!(parallel, one);
    assert_eq!(serial, one);
    // Unsorted or repeated sources, and a short `before`, change nothing.
    let kept = parallel.clone();
    let mut out = vec![SourceTrace::default(); 2];
    for bad in [[5u32, 3], [7, 7]] {
        assert!(matches!(
            parallel.spike_step(&r, 100.0, &bad, |c| c, &mut out, 2),
            Err(ModelError::Param { name: "spikes", .. })
        ));
    }
    assert!(matches!(
        parallel.spike_step(&r, 100.0, &[1, 2, 3], |c| c, &mut out, 2),
        Err(ModelError::Param { name: "before", .. })
    ));
    assert_eq!(parallel, kept);
    // A spike not after its source's last one is refused.
    let present = parallel.index().iter().next().unwrap();
    assert!(matches!(
        parallel.spike_step(&r, 0.0, &[present], |c| c, &mut out[..1], 1),
        Err(ModelError::TimeOrder { .. })
    ));
}
