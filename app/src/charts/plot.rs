//! The time charts, drawn by leptos-chartistry: one line per source over the
//! window's buckets, tick labels in the display zone from [`tick_label`] (the axis title names it), grid lines, a legend
//! where a chart has several lines, the unit in the Y axis title, and a hover
//! tooltip with the bucket's span and each line's value in its unit.
//!
//! The chart's width is its container's (`AspectRatio::from_env_width`), so
//! it fits a 390 px screen. It measures that width in the browser: the
//! server's render holds a placeholder until the page hydrates (the summary
//! above the charts carries the numbers without JavaScript).

use chrono::{DateTime, Utc};
use leptos::prelude::*;
use leptos_chartistry::{
    AspectRatio, AxisMarker, Chart, Colour, Interpolation, IntoEdge, IntoInner, Legend, Line, Marker, MarkerShape,
    Period, RotatedLabel, Series, TickLabels, Timestamps, Tooltip, TooltipPlacement, XGridLine, XGuideLine, YGridLine,
};
use lockscope_model::charts::{ms_label, Quantile};
use lockscope_model::time::{tick_label, zone_name};

use super::series::{bucket_text, per_second, wait_bound, Point};

type X = DateTime<Utc>;

/// The plot's outer height (px); its width is the container's.
const HEIGHT: f64 = 240.0;
/// Text size the layout is computed for: 12 px monospace is ~7.3 px a character.
const FONT_HEIGHT: f64 = 12.0;
const FONT_WIDTH: f64 = 7.3;

// On the page's dark panel (style/main.css's --line, --muted and state colours).
const GRID: Colour = Colour::from_rgb(0x26, 0x30, 0x3b);
const AXIS: Colour = Colour::from_rgb(0x8a, 0x96, 0xa3);
const BLUE: Colour = Colour::from_rgb(0x58, 0xa6, 0xff);
const AMBER: Colour = Colour::from_rgb(0xd2, 0x99, 0x22);
const GREEN: Colour = Colour::from_rgb(0x3f, 0xb9, 0x50);
const RED: Colour = Colour::from_rgb(0xf8, 0x51, 0x49);
const PURPLE: Colour = Colour::from_rgb(0xbc, 0x8c, 0xff);

fn period_ms(p: Period) -> i64 {
    match p {
        Period::Second => 1_000,
        Period::Minute => 60_000,
        Period::Hour => 3_600_000,
        _ => 86_400_000,
    }
}

/// UTC time ticks at whole seconds, minutes, hours or days, labelled as fine
/// as their spacing.
fn time_ticks() -> TickLabels<X> {
    TickLabels::from_generator(
        Timestamps::from_periods([Period::Second, Period::Minute, Period::Hour, Period::Day])
            .with_format(|p, at| tick_label(at.timestamp_millis(), period_ms(p))),
    )
}

/// A line drawn with `colour` and point markers of `shape`: a bucket between
/// two gaps still shows, and lines differ by more than colour. Straight
/// segments between buckets: chartistry's default (monotone) curve writes
/// `NaN` into the SVG path while its layout is momentarily zero wide (two
/// points at one x), which the browser reports as an error.
fn line(name: &str, colour: Colour, shape: MarkerShape, get: fn(&Point) -> f64) -> Line<Point, f64> {
    Line::new(get)
        .with_name(name)
        .with_colour(colour)
        .with_width(1.5)
        .with_interpolation(Interpolation::Linear)
        .with_marker(Marker::from_shape(shape).with_scale(0.45))
}

/// A chart of `lines` over the window's buckets. The Y axis starts at 0 and
/// reaches at least `min_top` (so a quiet window is a flat line at the bottom,
/// not noise blown up).
#[component]
fn TimeChart(
    data: Signal<Vec<Point>>,
    lines: Vec<Line<Point, f64>>,
    /// The Y axis' title, with its unit.
    y_title: &'static str,
    /// A value as the tooltip shows it.
    value: fn(f64) -> String,
    bucket_ms: i64,
    min_top: f64,
) -> impl IntoView {
    let legend = lines.len() > 1;
    let now = expect_context::<crate::live::LiveView>().now.get_untracked();
    let series = Series::new(|p: &Point| p.at)
        .lines(lines)
        .with_min_y(0.0)
        .with_max_y(min_top);
    let x = time_ticks();
    let y = TickLabels::aligned_floats();
    let tooltip = Tooltip::new(
        TooltipPlacement::LeftCursor,
        TickLabels::timestamps().with_format(move |at: &X, _| bucket_text(at.timestamp_millis(), bucket_ms)),
        TickLabels::aligned_floats().with_format(move |v: &f64, _| value(*v)),
    );
    let top = if legend {
        vec![Legend::start().into_edge()]
    } else {
        vec![]
    };
    view! {
        <div class="chart-box">
        <Chart
            aspect_ratio=AspectRatio::from_env_width(HEIGHT)
            font_height=FONT_HEIGHT
            font_width=FONT_WIDTH
            top=top
            left=vec![RotatedLabel::middle(y_title).into_edge(), y.clone().into_edge()]
            bottom=vec![x.clone().into_edge(), RotatedLabel::end(format!("time ({})", zone_name(now))).into_edge()]
            inner=vec![
                XGridLine::from_ticks(x).with_colour(GRID).into_inner(),
                YGridLine::from_ticks(y).with_colour(GRID).into_inner(),
                AxisMarker::left_edge().with_colour(AXIS).into_inner(),
                AxisMarker::bottom_edge().with_colour(AXIS).into_inner(),
                XGuideLine::over_data().with_colour(AXIS).into_inner(),
            ]
            tooltip=tooltip
            series=series
            data=data
        />
        </div>
    }
    .into_any()
}

fn rate(v: f64) -> String {
    per_second(v)
}

fn pct(v: f64) -> String {
    if v.is_nan() {
        return "no data".into();
    }
    format!("{v:.1}% of attempts")
}

/// A wait time; at the histogram's last bound, "≥" it (the percentile may be
/// anywhere beyond).
fn wait(v: f64) -> String {
    if v.is_nan() {
        "no waits".into()
    } else if v >= wait_bound() {
        format!("≥ {} (beyond the histogram)", ms_label(v))
    } else {
        ms_label(v)
    }
}

/// Acquisitions/s: the counters' and the history's.
#[component]
pub fn AcquisitionsChart(data: Signal<Vec<Point>>, bucket_ms: i64, seen: bool) -> impl IntoView {
    let mut lines = vec![line("sessions' counters", BLUE, MarkerShape::Square, |p| p.acquired)];
    if seen {
        lines.push(line("seen in history", AMBER, MarkerShape::Circle, |p| p.acquired_seen));
    }
    view! { <TimeChart data lines y_title="acquisitions/s" value=rate bucket_ms min_top=1.0/> }.into_any()
}

/// Conflicts/s (counters) and waits started/s (history).
#[component]
pub fn ConflictsChart(data: Signal<Vec<Point>>, bucket_ms: i64, seen: bool) -> impl IntoView {
    let mut lines = vec![line("conflicts (counters)", RED, MarkerShape::Square, |p| p.conflicts)];
    if seen {
        lines.push(line("waits (history)", AMBER, MarkerShape::Circle, |p| p.waits_seen));
    }
    view! { <TimeChart data lines y_title="events/s" value=rate bucket_ms min_top=1.0/> }.into_any()
}

/// Conflicts per attempt (counters), in %.
#[component]
pub fn ConflictRateChart(data: Signal<Vec<Point>>, bucket_ms: i64) -> impl IntoView {
    let lines = vec![line("conflict rate", RED, MarkerShape::Square, |p| p.conflict_pct)];
    view! { <TimeChart data lines y_title="% of attempts" value=pct bucket_ms min_top=10.0/> }.into_any()
}

/// Wait time percentiles (counters' histogram); buckets where one is beyond
/// the histogram get a triangle at its last bound.
#[component]
pub fn WaitChart(data: Signal<Vec<Point>>, bucket_ms: i64) -> impl IntoView {
    let beyond = Quantile::Above(wait_bound() as u64).label();
    let lines = vec![
        line("p50", GREEN, MarkerShape::Circle, |p| p.p50),
        line("p95", AMBER, MarkerShape::Square, |p| p.p95),
        line("p99", RED, MarkerShape::Diamond, |p| p.p99),
        Line::new(|p: &Point| p.beyond)
            .with_name(beyond)
            .with_colour(PURPLE)
            .with_width(1.0)
            .with_interpolation(Interpolation::Linear)
            .with_marker(Marker::from_shape(MarkerShape::Triangle).with_scale(1.2)),
    ];
    view! { <TimeChart data lines y_title="wait (ms)" value=wait bucket_ms min_top=10.0/> }.into_any()
}
