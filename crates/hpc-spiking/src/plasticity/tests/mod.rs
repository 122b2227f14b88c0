//! The rule against closed forms and against an all-to-all reference computed
//! from the spike trains directly (sums over every pair, no traces, no archive).

use super::*;

const H: f64 = 0.1;

fn rule(tau_plus: f64, lambda: f64, alpha: f64, mu: f64) -> StdpPlHom {
    StdpPlHom::new(StdpPlParams {
        tau_plus,
        lambda,
        alpha,
        mu,
    })
    .unwrap()
}

/// The rule's parameters in NEST's hpc_benchmark (tau_plus 15 ms, lambda 0.1,
/// alpha 0.0513, mu 0.4).
fn benchmark_params() -> StdpPlParams {
    StdpPlParams {
        tau_plus: 15.0,
        lambda: 0.1,
        alpha: 0.0513,
        mu: 0.4,
    }
}

/// Times on the 0.1 ms grid from step numbers.
fn grid(steps: &[u32]) -> Vec<f64> {
    steps.iter().map(|&s| s as f64 * H).collect()
}

/// Drives one synapse: before each presynaptic spike at `t`, records every
/// postsynaptic spike with `t_post + d <= t` (or, with `eager`, every one with
/// `t_post <= t`); answers the weight after each presynaptic spike.
fn drive(
    r: &StdpPlHom,
    (tau_minus, min_delay): (f64, f64),
    d: f64,
    w0: f64,
    pre: &[f64],
    post: &[f64],
    eager: bool,
) -> Vec<f64> {
    let mut archive = vec![PostArchive::new(tau_minus, min_delay).unwrap()];
    let mut row = StdpRow::new(d).unwrap();
    row.connect(0, w0, &mut archive).unwrap();
    let mut next = 0;
    let mut out = Vec::new();
    for &t in pre {
        let horizon = if eager { t } else { t - d };
        while next < post.len() && post[next] <= horizon + 1e-9 {
            archive[0].record_post_spike(post[next]).unwrap();
            next += 1;
        }
        let got: Vec<(u32, f64)> = row.deliver(r, t, &mut archive).unwrap().collect();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, 0);
        out.push(got[0].1);
    }
    out
}

/// The all-to-all reference: at presynaptic spike `k`, facilitation by each
/// postsynaptic spike that reached the synapse after spike `k - 1` and at or
/// before spike `k`, with `K+` summed over every earlier presynaptic spike; then
/// depression with `K-` summed over every postsynaptic spike that reached the
/// synapse strictly before.
fn reference(
    p: &StdpPlParams,
    tau_minus: f64,
    d: f64,
    w0: f64,
    pre: &[f64],
    post: &[f64],
) -> Vec<f64> {
    let tol = 1e-9;
    let mut w = w0;
    let mut out = Vec::with_capacity(pre.len());
    for (k, &t) in pre.iter().enumerate() {
        let prev = if k == 0 { 0.0 } else { pre[k - 1] };
        for &tp in post {
            let arrival = tp + d;
            if arrival > prev + tol && arrival <= t + tol {
                let k_plus: f64 = pre[..k]
                    .iter()
                    .map(|&tj| (-(arrival - tj) / p.tau_plus).exp())
                    .sum();
                w += p.lambda * w.powf(p.mu) * k_plus;
            }
        }
        let k_minus: f64 = post
            .iter()
            .filter(|&&tp| tp + d < t - tol)
            .map(|&tp| (-((t - d) - tp) / tau_minus).exp())
            .sum();
        w = (w - p.alpha * p.lambda * w * k_minus).max(0.0);
        out.push(w);
    }
    out
}

fn assert_close(got: &[f64], want: &[f64], rel: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let err = (g - w).abs() / w.abs().max(1e-300);
        assert!(
            err <= rel || g == w,
            "{what}: weight {i}: {g} vs {w} (relative {err:e})"
        );
    }
}

/// A Poisson train on the grid: `rate` (Hz) over `[start, stop)` steps, at most
/// one spike a step (the crate's counter-based stream `seed`).
fn poisson(seed: u64, rate: f64, start: u32, stop: u32) -> Vec<f64> {
    let key = crate::rng::stream_key(seed, crate::rng::Purpose::External, 0);
    let threshold = (rate * H * 1e-3 * 2f64.powi(64)) as u64;
    (start..stop)
        .filter(|&s| crate::rng::draw(key, s as u64) < threshold)
        .map(|s| s as f64 * H)
        .collect()
}

/// Every spike of `trains` as `(time, train)`, in time order (ties by train).
fn in_time_order(trains: &[Vec<f64>]) -> Vec<(f64, usize)> {
    let mut events: Vec<(f64, usize)> = trains
        .iter()
        .enumerate()
        .flat_map(|(i, ts)| ts.iter().map(move |&t| (t, i)))
        .collect();
    events.sort_by(|a, b| a.partial_cmp(b).unwrap());
    events
}

#[test]
fn one_pair_at_every_lag_matches_the_closed_form() {
    let (tau_minus, d, w0) = (33.7, 1.5, 0.5);
    let d_steps = 15i64;
    for mu in [0.0, 0.4, 1.0] {
        let p = StdpPlParams {
            tau_plus: 20.0,
            lambda: 0.1,
            alpha: 1.0,
            mu,
        };
        let r = StdpPlHom::new(p).unwrap();
        // Presynaptic spikes at 50 ms and 200 ms; one postsynaptic spike at
        // 50 ms + lag, lag from -10 ms to +10 ms in steps.
        let a = 500i64;
        for lag in -100i64..=100 {
            let tp_step = a + lag;
            let tp = tp_step as f64 * H;
            let w = drive(&r, (tau_minus, 0.1), d, w0, &[50.0, 200.0], &[tp], false);
            // At 50 ms: depression when the spike reached the synapse strictly
            // before (tp + d < 50).
            let w1 = if tp_step + d_steps < a {
                w0 - p.lambda * p.alpha * w0 * (-((50.0 - d) - tp) / tau_minus).exp()
            } else {
                w0
            };
            // At 200 ms: facilitation when it reached the synapse strictly after
            // 50 ms (K+ = 1 after the first presynaptic spike), then depression.
            let f = if tp_step + d_steps > a {
                w1 + p.lambda * w1.powf(mu) * (-(tp + d - 50.0) / p.tau_plus).exp()
            } else {
                w1
            };
            let w2 = f - p.lambda * p.alpha * f * (-((200.0 - d) - tp) / tau_minus).exp();
            assert_close(&w, &[w1, w2], 1e-14, &format!("mu {mu} lag {lag}"));
            if tp_step + d_steps == a {
                // The coincident pair (the spike reaches the synapse with the
                // presynaptic one) neither facilitates nor depresses.
                assert_eq!(w[0], w0);
                assert!(w[1] < w0, "only the later depression acts");
            }
            if lag > 0 {
                assert!(f > w1, "pre before post facilitates (lag {lag})");
            }
            if tp_step + d_steps < a {
                assert!(w1 < w0, "post before pre depresses (lag {lag})");
            }
        }
    }
}

#[test]
fn additive_and_multiplicative_facilitation() {
    // mu = 0: the step does not depend on w; mu = 1: it is proportional to w.
    let post = [60.0];
    for (mu, w0) in [(0.0, 1.0), (0.0, 7.0), (1.0, 1.0), (1.0, 7.0)] {
        let r = rule(20.0, 0.05, 0.0, mu);
        let w = drive(&r, (20.0, 0.1), 1.5, w0, &[50.0, 100.0], &post, false);
        let step = w[1] - w0;
        let k = (-(61.5f64 - 50.0) / 20.0).exp();
        let want = if mu == 0.0 { 0.05 * k } else { 0.05 * w0 * k };
        assert!(
            (step - want).abs() < 1e-15 * w0.max(1.0),
            "mu {mu} w0 {w0}: {step} vs {want}"
        );
    }
}

#[test]
fn bursts_sum_their_traces() {
    let p = benchmark_params();
    let r = StdpPlHom::new(p).unwrap();
    let (tau_minus, d, w0) = (30.0, 1.5, 45.0);
    // A presynaptic burst, a postsynaptic spike, then a postsynaptic burst and a
    // presynaptic spike.
    let pre = [10.0, 12.0, 14.0, 60.0];
    let post = [20.0, 40.0, 41.0, 42.0];
    let w = drive(&r, (tau_minus, 0.1), d, w0, &pre, &post, false);
    assert_eq!(&w[..3], &[w0, w0, w0]);
    let k_plus: f64 = [10.0, 12.0, 14.0]
        .iter()
        .map(|tj| (-(20.0 + d - tj) / 15.0).exp())
        .sum();
    let f = w0 + p.lambda * w0.powf(p.mu) * k_plus;
    // 40, 41, 42 reach the synapse after 14 ms too: they facilitate with K+
    // decayed further, in order.
    let mut f = f;
    for tp in [40.0, 41.0, 42.0] {
        let k: f64 = [10.0, 12.0, 14.0]
            .iter()
            .map(|tj| (-(tp + d - tj) / 15.0).exp())
            .sum();
        f += p.lambda * f.powf(p.mu) * k;
    }
    let k_minus: f64 = post
        .iter()
        .map(|tp| (-(60.0 - d - tp) / tau_minus).exp())
        .sum();
    let want = f - p.lambda * p.alpha * f * k_minus;
    assert_close(&w[3..], &[want], 1e-13, "bursts");
}

#[test]
fn long_trains_match_the_all_to_all_reference() {
    // NEST's own test's set-up: Poisson trains of both neurons plus hand-placed
    // edge cases (coincident, one step apart, bursts), several delays and
    // shortest delays, weights compared after every presynaptic spike.
    // NEST's defaults (tau_plus 20 ms, lambda 0.1, alpha 1, mu 0.4).
    let p = StdpPlParams::default();
    let r = StdpPlHom::new(p).unwrap();
    let tau_minus = 33.7;
    let edge_pre = [
        1u32, 5, 6, 7, 9, 11, 12, 13, 14, 16, 21, 25, 26, 27, 29, 31, 32, 33, 34, 36,
    ];
    let edge_post = [
        2u32, 3, 4, 8, 9, 10, 12, 13, 14, 15, 22, 23, 24, 28, 29, 30, 32, 33, 35, 36,
    ];
    let mut cases = 0;
    for (seed, rate) in [(1u64, 20.0), (2, 50.0), (3, 100.0)] {
        for d_steps in [1u32, 5, 10, 15] {
            let d = d_steps as f64 * H;
            // Edge cases at 10-step spacing, shifted so that the delay makes
            // postsynaptic spikes coincide with presynaptic ones.
            let base = 10_000u32;
            let mut pre = poisson(seed, rate, 1, base);
            let mut post = poisson(seed + 100, rate, 1, base);
            pre.extend(grid(
                &edge_pre.iter().map(|s| base + 10 * s).collect::<Vec<_>>(),
            ));
            post.extend(grid(
                &edge_post
                    .iter()
                    .map(|s| base + 10 * s - d_steps)
                    .collect::<Vec<_>>(),
            ));
            let want = reference(&p, tau_minus, d, 0.5, &pre, &post);
            for min_delay in [0.1, 0.4, 1.0] {
                for eager in [false, true] {
                    let got = drive(&r, (tau_minus, min_delay), d, 0.5, &pre, &post, eager);
                    assert_close(
                        &got,
                        &want,
                        1e-12,
                        &format!("rate {rate} d {d} min_delay {min_delay}"),
                    );
                    cases += 1;
                }
            }
            assert!(pre.len() > 20, "{} presynaptic spikes", pre.len());
        }
    }
    assert_eq!(cases, 72);
}

#[test]
fn sources_of_several_delays_share_a_target_archive() {
    // Three sources onto one target (delays 0.1, 0.7, 1.5 ms) and a second
    // target; each synapse must see the archive as if it were alone.
    let p = benchmark_params();
    let r = StdpPlHom::new(p).unwrap();
    let tau_minus = 30.0;
    let delays = [0.1, 0.7, 1.5];
    let pres: Vec<Vec<f64>> = (0..3).map(|i| poisson(10 + i, 40.0, 1, 20_000)).collect();
    let posts = [poisson(20, 40.0, 1, 20_000), poisson(21, 5.0, 1, 20_000)];
    let mut archives: Vec<PostArchive> = (0..2)
        .map(|_| PostArchive::new(tau_minus, 0.1).unwrap())
        .collect();
    let mut rows: Vec<StdpRow> = delays.iter().map(|&d| StdpRow::new(d).unwrap()).collect();
    for row in rows.iter_mut() {
        row.connect(0, 45.0, &mut archives).unwrap();
        row.connect(1, 30.0, &mut archives).unwrap();
    }
    // Every presynaptic spike in time order (ties by source); postsynaptic
    // spikes up to its time recorded first.
    let events = in_time_order(&pres);
    let mut next = [0usize; 2];
    let mut got: Vec<Vec<[f64; 2]>> = vec![Vec::new(); 3];
    let mut longest = 0;
    for (t, i) in events {
        for j in 0..2 {
            while next[j] < posts[j].len() && posts[j][next[j]] <= t {
                archives[j].record_post_spike(posts[j][next[j]]).unwrap();
                next[j] += 1;
            }
            longest = longest.max(archives[j].archived());
        }
        let w: Vec<(u32, f64)> = rows[i].deliver(&r, t, &mut archives).unwrap().collect();
        got[i].push([w[0].1, w[1].1]);
    }
    for i in 0..3 {
        for j in 0..2 {
            let want = reference(
                &p,
                tau_minus,
                delays[i],
                [45.0, 30.0][j],
                &pres[i],
                &posts[j],
            );
            let g: Vec<f64> = got[i].iter().map(|w| w[j]).collect();
            assert_close(&g, &want, 1e-12, &format!("source {i} target {j}"));
        }
    }
    // Every source fires, so the archive stays short (40 Hz: a few spikes
    // within the longest inter-spike interval).
    assert!(longest < 40, "{longest} spikes archived");
    assert_eq!(archives[0].incoming(), 3);
}

#[test]
fn a_silent_source_keeps_the_spikes_it_has_not_read() {
    let r = rule(20.0, 0.1, 1.0, 0.4);
    let mut archives = vec![PostArchive::new(20.0, 0.1).unwrap()];
    let mut firing = StdpRow::new(1.0).unwrap();
    let mut silent = StdpRow::new(1.0).unwrap();
    firing.connect(0, 1.0, &mut archives).unwrap();
    silent.connect(0, 1.0, &mut archives).unwrap();
    for k in 1..=200 {
        archives[0].record_post_spike(k as f64 * 10.0).unwrap();
        firing
            .deliver(&r, k as f64 * 10.0 + 5.0, &mut archives)
            .unwrap()
            .for_each(drop);
    }
    assert_eq!(archives[0].archived(), 200);
    // Once it fires it reads them all: its weight is the reference's.
    let got: Vec<f64> = silent
        .deliver(&r, 2100.0, &mut archives)
        .unwrap()
        .map(|x| x.1)
        .collect();
    let post: Vec<f64> = (1..=200).map(|k| k as f64 * 10.0).collect();
    let want = reference(r.params(), 20.0, 1.0, 1.0, &[2100.0], &post);
    assert_close(&got, &want, 1e-12, "silent");
    // With every synapse read up to date, the next spike prunes the archive.
    firing
        .deliver(&r, 2100.0, &mut archives)
        .unwrap()
        .for_each(drop);
    archives[0].record_post_spike(2200.0).unwrap();
    assert!(archives[0].archived() <= 2, "{}", archives[0].archived());
}

#[test]
fn depression_clips_at_zero() {
    // alpha * lambda * K- > 1: the weight is clipped at 0 and, with mu > 0,
    // facilitation cannot bring it back (0^mu = 0).
    let r = rule(20.0, 1.0, 2.0, 0.4);
    let w = drive(
        &r,
        (20.0, 0.1),
        1.5,
        3.0,
        &[11.6, 30.0, 50.0],
        &[10.0, 20.0, 40.0],
        false,
    );
    assert_eq!(w, vec![0.0, 0.0, 0.0]);
    // With mu = 0 facilitation adds lambda * K+ whatever the weight.
    let r0 = rule(20.0, 1.0, 2.0, 0.0);
    let w = drive(
        &r0,
        (20.0, 0.1),
        1.5,
        3.0,
        &[11.6, 100.0],
        &[10.0, 20.0],
        false,
    );
    assert_eq!(w[0], 0.0);
    let f = (-(21.5f64 - 11.6) / 20.0).exp();
    let k_minus = (-(98.5f64 - 20.0) / 20.0).exp() + (-(98.5f64 - 10.0) / 20.0).exp();
    let want = f - 2.0 * f * k_minus;
    assert!(want > 0.0);
    assert_close(&w[1..], &[want], 1e-14, "mu = 0 after clipping");
}

/// A step and exponent that grow a weight beyond the finite numbers: an error
/// naming them, not an infinite weight that the depression (NaN > 0 is false)
/// would silently clip to 0 while it drove the target (`hpc_benchmark --mu 50`
/// ran at 1,489 Hz with every E->E weight reported as 0).
#[test]
fn a_weight_grown_beyond_the_finite_numbers_is_an_error() {
    let r = rule(20.0, 0.1, 0.05, 300.0);
    let mut archive = vec![PostArchive::new(20.0, 0.1).unwrap()];
    let mut row = StdpRow::new(1.5).unwrap();
    row.connect(0, 45.6, &mut archive).unwrap();
    row.deliver(&r, 5.0, &mut archive).unwrap().for_each(drop);
    archive[0].record_post_spike(6.0).unwrap();
    let e = row
        .deliver(&r, 10.0, &mut archive)
        .err()
        .expect("an overflow");
    assert!(matches!(e, ModelError::WeightOverflow { .. }), "{e}");
    let m = e.to_string();
    assert!(
        m.contains("lambda 0.1 and mu 300") && m.contains("from 45.6"),
        "{m}"
    );
}

#[test]
fn zero_learning_rate_leaves_weights_unchanged() {
    let r = rule(20.0, 0.0, 1.0, 0.4);
    let pre = poisson(5, 80.0, 1, 20_000);
    let post = poisson(6, 80.0, 1, 20_000);
    let w = drive(&r, (20.0, 0.1), 1.5, 0.5, &pre, &post, false);
    assert!(w.len() > 100);
    assert!(w.iter().all(|&x| x == 0.5));
}

#[test]
fn traces_follow_their_definitions() {
    let r = rule(15.0, 0.1, 1.0, 0.4);
    let mut a = vec![PostArchive::new(30.0, 0.1).unwrap()];
    let mut row = StdpRow::new(1.5).unwrap();
    row.connect(0, 1.0, &mut a).unwrap();
    for t in [10.0, 12.0, 13.0] {
        a[0].record_post_spike(t).unwrap();
    }
    let want: f64 = [10.0f64, 12.0, 13.0]
        .iter()
        .map(|t| (-(20.0 - t) / 30.0).exp())
        .sum();
    assert!((a[0].k_minus_before(20.0) - want).abs() < 1e-14);
    // At exactly a spike's time, K- is the one just before it.
    let before_13 = (-3.0f64 / 30.0).exp() + (-1.0f64 / 30.0).exp();
    assert!((a[0].k_minus_before(13.0) - before_13).abs() < 1e-14);
    assert_eq!(a[0].k_minus_before(10.0), 0.0);
    for t in [5.0, 7.0] {
        row.deliver(&r, t, &mut a).unwrap().for_each(drop);
    }
    assert!((row.k_plus() - ((-2.0f64 / 15.0).exp() + 1.0)).abs() < 1e-15);
    assert_eq!(row.t_last(), 7.0);
}

#[test]
fn bad_parameters_and_events_are_refused_by_name() {
    let ok = StdpPlParams::default();
    for (name, p) in [
        (
            "tau_plus",
            StdpPlParams {
                tau_plus: 0.0,
                ..ok
            },
        ),
        (
            "tau_plus",
            StdpPlParams {
                tau_plus: f64::NAN,
                ..ok
            },
        ),
        (
            "tau_plus",
            StdpPlParams {
                tau_plus: f64::INFINITY,
                ..ok
            },
        ),
        ("lambda", StdpPlParams { lambda: -0.1, ..ok }),
        ("alpha", StdpPlParams { alpha: -1.0, ..ok }),
        ("mu", StdpPlParams { mu: -0.4, ..ok }),
        ("mu", StdpPlParams { mu: f64::NAN, ..ok }),
    ] {
        match StdpPlHom::new(p) {
            Err(ModelError::Param { name: n, .. }) => assert_eq!(n, name),
            other => panic!("{name}: {other:?}"),
        }
    }
    assert!(matches!(
        PostArchive::new(-20.0, 0.1),
        Err(ModelError::Param {
            name: "tau_minus",
            ..
        })
    ));
    assert!(matches!(
        PostArchive::new(20.0, f64::NAN),
        Err(ModelError::Param {
            name: "min_delay",
            ..
        })
    ));
    assert!(matches!(
        StdpRow::new(0.0),
        Err(ModelError::Param { name: "delay", .. })
    ));

    let r = StdpPlHom::new(ok).unwrap();
    let mut a = vec![PostArchive::new(20.0, 0.1).unwrap()];
    let mut row = StdpRow::new(1.0).unwrap();
    assert!(matches!(
        row.connect(0, -1.0, &mut a),
        Err(ModelError::Param { name: "weight", .. })
    ));
    assert!(matches!(
        row.connect(0, f64::NAN, &mut a),
        Err(ModelError::Param { name: "weight", .. })
    ));
    assert_eq!(
        row.connect(3, 1.0, &mut a),
        Err(ModelError::Target { target: 3, len: 1 })
    );
    row.connect(0, 1.0, &mut a).unwrap();
    assert!(row.deliver(&r, 5.0, &mut []).is_err());
    assert!(matches!(
        row.deliver(&r, 0.0, &mut a),
        Err(ModelError::TimeOrder { .. })
    ));
    row.deliver(&r, 5.0, &mut a).unwrap().for_each(drop);
    assert!(matches!(
        row.deliver(&r, 5.0, &mut a),
        Err(ModelError::TimeOrder { .. })
    ));
    assert!(matches!(
        row.deliver(&r, f64::NAN, &mut a),
        Err(ModelError::TimeOrder { .. })
    ));
    a[0].record_post_spike(3.0).unwrap();
    assert!(matches!(
        a[0].record_post_spike(3.0),
        Err(ModelError::TimeOrder { .. })
    ));
    assert!(matches!(
        a[0].record_post_spike(f64::INFINITY),
        Err(ModelError::TimeOrder { .. })
    ));
    // A refused event changed nothing.
    assert_eq!(a[0].archived(), 1);
    assert_eq!(row.t_last(), 5.0);
}

/// A row and its archives restored from their saved state, half-way through two
/// trains, end with the weights of the uninterrupted run, bit for bit; bad saved
/// values are refused without changing anything.
#[test]
fn a_restored_row_and_archive_continue_exactly() {
    let r = rule(15.0, 0.1, 0.0513, 0.4);
    let pre = poisson(3, 20.0, 1, 40_000);
    let post = poisson(4, 30.0, 1, 40_000);
    let d = 1.5;
    let run = |split: Option<usize>| -> Vec<f64> {
        let mut archive = vec![PostArchive::new(30.0, d).unwrap()];
        let mut row = StdpRow::new(d).unwrap();
        row.connect(0, 45.0, &mut archive).unwrap();
        row.connect(0, 40.0, &mut archive).unwrap();
        let mut next = 0;
        for (k, &t) in pre.iter().enumerate() {
            if split == Some(k) {
                let (a, rw) = (&archive[0], &row);
                let spikes: Vec<ArchivedSpike> = a.archived_spikes().collect();
                let (trace, last, weights) = (a.trace(), a.last_spike(), rw.weights().to_vec());
                let (kp, tl) = (rw.k_plus(), rw.t_last());
                archive = vec![PostArchive::new(30.0, d).unwrap()];
                row = StdpRow::new(d).unwrap();
                row.connect(0, 45.0, &mut archive).unwrap();
                row.connect(0, 40.0, &mut archive).unwrap();
                archive[0].restore(trace, last, &spikes).unwrap();
                row.restore(kp, tl, &weights).unwrap();
            }
            while next < post.len() && post[next] <= t - d + 1e-9 {
                archive[0].record_post_spike(post[next]).unwrap();
                next += 1;
            }
            row.deliver(&r, t, &mut archive).unwrap().for_each(drop);
        }
        row.weights().to_vec()
    };
    let whole = run(None);
    assert!(whole[0] != 45.0 && whole[1] != 40.0, "{whole:?}");
    assert_eq!(whole, run(Some(pre.len() / 2)));

    let mut archive = vec![PostArchive::new(30.0, d).unwrap()];
    let mut row = StdpRow::new(d).unwrap();
    row.connect(0, 45.0, &mut archive).unwrap();
    let bad = |t: f64, reads: u32| ArchivedSpike {
        t,
        k_minus: 1.0,
        reads,
    };
    let e = archive[0].restore(f64::NAN, 1.0, &[]).unwrap_err();
    assert!(e.to_string().contains("K-"), "{e}");
    let e = archive[0]
        .restore(1.0, 5.0, &[bad(2.0, 0), bad(1.0, 0)])
        .unwrap_err();
    assert!(matches!(e, ModelError::TimeOrder { .. }), "{e}");
    let e = archive[0].restore(1.0, 5.0, &[bad(2.0, 2)]).unwrap_err();
    assert!(e.to_string().contains("reads"), "{e}");
    assert_eq!(archive[0].archived(), 0);
    let e = row.restore(-1.0, 0.0, &[45.0]).unwrap_err();
    assert!(e.to_string().contains("K+"), "{e}");
    let e = row.restore(1.0, 0.0, &[45.0, 1.0]).unwrap_err();
    assert!(e.to_string().contains("weights"), "{e}");
    let e = row.restore(1.0, 0.0, &[f64::NAN]).unwrap_err();
    assert!(e.to_string().contains("weight"), "{e}");
    assert_eq!(row.weights(), &[45.0]);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Any parameters in their domain, any delay on the grid, any trains: the
    /// reference's weights. (Absolute tolerance on the scale of the weights:
    /// where depression nearly cancels a weight, the two summation orders'
    /// roundings differ by more than 1e-12 of the small remainder.)
    #[test]
    fn random_rules_and_trains_match_the_reference(
        tau_plus in 1.0f64..50.0,
        tau_minus in 1.0f64..50.0,
        lambda in 0.0f64..0.5,
        alpha in 0.0f64..3.0,
        mu in 0.0f64..1.0,
        w0 in 0.0f64..100.0,
        d_steps in 1u32..30,
        min_delay_steps in 1u32..10,
        pre in proptest::collection::btree_set(1u32..3000, 1..60),
        post in proptest::collection::btree_set(1u32..3000, 0..60),
    ) {
        let p = StdpPlParams { tau_plus, lambda, alpha, mu };
        let r = StdpPlHom::new(p).unwrap();
        let (pre, post): (Vec<u32>, Vec<u32>) = (pre.into_iter().collect(), post.into_iter().collect());
        let (pre, post) = (grid(&pre), grid(&post));
        let d = d_steps as f64 * H;
        let got = drive(&r, (tau_minus, min_delay_steps as f64 * H), d, w0, &pre, &post, false);
        let want = reference(&p, tau_minus, d, w0, &pre, &post);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let scale = w0.max(*w).max(1e-300);
            proptest::prop_assert!((g - w).abs() <= 1e-11 * scale, "weight {}: {} vs {}", i, g, w);
        }
    }
}

mod rows;
