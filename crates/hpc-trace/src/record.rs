//! The layer: spans entered and left, and events, as Chrome trace events.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::span;
use tracing::Subscriber;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

use crate::sink::{Event, Sink};
use crate::{clock, Error, REGION};

/// A `tracing_subscriber::Layer` that records this process's spans and events into
/// its trace file (see the [crate] documentation). Clones share the file.
///
/// `hpc_rs::init()` installs one when `HPC_TRACE` is set; a program with a
/// subscriber of its own adds it there:
///
/// ```
/// use tracing_subscriber::{layer::SubscriberExt as _, Layer as _};
/// if let Some(layer) = hpc_trace::layer_from_env()? {
///     let subscriber = tracing_subscriber::registry()
///         .with(layer.with_filter(hpc_trace::default_filter()));
///     tracing::subscriber::set_global_default(subscriber)?;
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct TraceLayer {
    sink: Arc<Sink>,
}

impl std::fmt::Debug for TraceLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceLayer")
            .field("pid", &self.sink.pid())
            .finish()
    }
}

impl TraceLayer {
    /// Starts recording into `dir` (made if missing): this process's file is
    /// `dir/pid-<PID>.json.part` until it finishes. The file is finished at exit, or
    /// by [`crate::finish`] or [`TraceLayer::finish`].
    pub fn create(dir: &Path) -> Result<TraceLayer, Error> {
        Self::create_named(dir, "trace directory")
    }

    pub(crate) fn create_named(dir: &Path, what: &str) -> Result<TraceLayer, Error> {
        let sink = Arc::new(Sink::create(dir, what)?);
        crate::SINKS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(sink.clone());
        crate::finish_at_exit_once();
        Ok(TraceLayer { sink })
    }

    /// Names this file as rank `rank`'s (see [`crate::set_rank`]: a rank
    /// beyond [`crate::merge::MAX_RANK`] is not taken).
    pub fn set_rank(&self, rank: usize) {
        self.sink.set_rank(rank);
    }

    /// Records the number of ranks of the job (see [`crate::set_size`]).
    pub fn set_size(&self, size: usize) {
        self.sink.set_size(size);
    }

    /// Finishes the file (see [`crate::finish`]); its final path.
    pub fn finish(&self) -> Result<Option<PathBuf>, Error> {
        self.sink.finish()
    }

    fn now_us(&self, ns: u64) -> f64 {
        ns.saturating_sub(self.sink.start_ns) as f64 / 1000.0
    }
}

/// What the layer keeps of a span: its fields, and when it was entered on which
/// threads (a span may be entered on several at once).
struct SpanData {
    fields: Map<String, Value>,
    open: Vec<(u32, u64)>,
}

/// The fields of a span or an event as JSON values.
struct Fields<'a>(&'a mut Map<String, Value>);

impl Visit for Fields<'_> {
    /// A value that is not a finite number, which JSON has no number for, is
    /// the string `NaN`, `inf` or `-inf`: it was `null`, as a field without a
    /// value, and a NaN residual was told apart from nothing.
    fn record_f64(&mut self, field: &Field, value: f64) {
        let v = serde_json::Number::from_f64(value).map_or_else(
            || {
                Value::from(if value.is_nan() {
                    "NaN"
                } else if value > 0.0 {
                    "inf"
                } else {
                    "-inf"
                })
            },
            Value::Number,
        );
        self.0.insert(field.name().to_string(), v);
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_string(), value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_string(), value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_string(), value.into());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}").into());
    }
}

thread_local! {
    static TID: Cell<u32> = const { Cell::new(0) };
}

/// This thread's id (the kernel's), read once per thread.
fn tid() -> u32 {
    TID.with(|t| {
        if t.get() == 0 {
            t.set(rustix::thread::gettid().as_raw_nonzero().get() as u32);
        }
        t.get()
    })
}

fn thread_name() -> String {
    let t = std::thread::current();
    match t.name() {
        Some(n) => n.to_string(),
        None => format!("thread {}", tid()),
    }
}

/// The name an event shows: a region's `name` field, else the span's name.
fn shown_name<'a>(name: &'static str, fields: &'a Map<String, Value>) -> &'a str {
    if name == REGION {
        if let Some(Value::String(n)) = fields.get("name") {
            return n;
        }
    }
    name
}

impl<S> tracing_subscriber::Layer<S> for TraceLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        let mut fields = Map::new();
        attrs.record(&mut Fields(&mut fields));
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanData {
                fields,
                open: Vec::new(),
            });
        }
    }

    fn on_record(&self, id: &span::Id, values: &span::Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(data) = span.extensions_mut().get_mut::<SpanData>() {
                values.record(&mut Fields(&mut data.fields));
            }
        }
    }

    fn on_enter(&self, id: &span::Id, ctx: Context<'_, S>) {
        let now = clock::monotonic_ns();
        if let Some(span) = ctx.span(id) {
            if let Some(data) = span.extensions_mut().get_mut::<SpanData>() {
                data.open.push((tid(), now));
            }
        }
    }

    fn on_exit(&self, id: &span::Id, ctx: Context<'_, S>) {
        let now = clock::monotonic_ns();
        let Some(span) = ctx.span(id) else { return };
        let mut ext = span.extensions_mut();
        let Some(data) = ext.get_mut::<SpanData>() else {
            return;
        };
        let me = tid();
        let Some(i) = data.open.iter().rposition(|&(t, _)| t == me) else {
            return;
        };
        let (_, start) = data.open.swap_remove(i);
        let meta = span.metadata();
        let ts = self.now_us(start);
        let ev = Event {
            name: shown_name(meta.name(), &data.fields),
            cat: meta.target(),
            ph: "X",
            ts,
            dur: Some(self.now_us(now) - ts),
            pid: self.sink.pid(),
            tid: me,
            s: None,
            args: &data.fields,
        };
        self.sink.write(&ev, thread_name);
    }

    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let now = clock::monotonic_ns();
        let mut fields = Map::new();
        event.record(&mut Fields(&mut fields));
        let meta = event.metadata();
        let name = match fields.get("message") {
            Some(Value::String(m)) => m.clone(),
            _ => meta.name().to_string(),
        };
        fields.insert("level".into(), meta.level().as_str().into());
        let ev = Event {
            name: &name,
            cat: meta.target(),
            ph: "i",
            ts: self.now_us(now),
            dur: None,
            pid: self.sink.pid(),
            tid: tid(),
            s: Some("t"),
            args: &fields,
        };
        self.sink.write(&ev, thread_name);
    }
}
