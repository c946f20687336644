//! `--plot FILE.svg`: algbw and busbw against message size, both axes
//! logarithmic, one pair of panels per collective, one line per layer and
//! mode (colour = layer, solid = out-of-place, dashed = in-place).
//!
//! Drawn with plotters' SVG backend and no font features: text becomes SVG
//! `<text>` elements that the viewer renders, so nothing needs system fonts.
//! Points that a log axis cannot show (a zero size or a zero bandwidth, e.g.
//! busbw at world size 1) are left out; a panel with none says so.

use std::path::Path;

use plotters::prelude::*;

use crate::collective::Mode;
use crate::error::BenchError;
use crate::report::Row;

/// Which bandwidth a panel shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// Algorithm bandwidth.
    Algbw,
    /// Bus bandwidth.
    Busbw,
}

impl Metric {
    /// The column name.
    pub const fn name(self) -> &'static str {
        match self {
            Metric::Algbw => "algbw",
            Metric::Busbw => "busbw",
        }
    }
}

/// The label of one series: `<layer> <mode>` (`raw out-of-place`).
pub fn series_name(layer: &str, mode: Mode) -> String {
    let mode = match mode {
        Mode::OutOfPlace => "out-of-place",
        Mode::InPlace => "in-place",
    };
    format!("{layer} {mode}")
}

/// One line of a panel: its label, the layer's colour index, its mode and
/// its (size, GB/s) points, in size order.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// `<layer> <mode>`.
    pub name: String,
    /// The layer's index among the layers of the rows (its colour).
    pub color: usize,
    /// Out-of-place (solid) or in-place (dashed).
    pub mode: Mode,
    /// Positive points only.
    pub points: Vec<(f64, f64)>,
}

/// The collectives of `rows`, in order of first appearance.
pub fn collectives(rows: &[Row]) -> Vec<&'static str> {
    let mut names: Vec<&'static str> = Vec::new();
    for row in rows {
        if !names.contains(&row.collective) {
            names.push(row.collective);
        }
    }
    names
}

/// The series of one panel: every (layer, mode) of `collective` in `rows`,
/// layers in order of first appearance, out-of-place first.
pub fn panel_series(rows: &[Row], collective: &str, metric: Metric) -> Vec<Series> {
    let mut layers: Vec<&'static str> = Vec::new();
    for row in rows {
        if !layers.contains(&row.layer) {
            layers.push(row.layer);
        }
    }
    let mut series = Vec::new();
    for (color, layer) in layers.iter().enumerate() {
        for mode in Mode::BOTH {
            let mut points: Vec<(f64, f64)> = rows
                .iter()
                .filter(|row| row.collective == collective && row.layer == *layer)
                .filter_map(|row| {
                    let m = row.measurement(mode)?;
                    let value = match metric {
                        Metric::Algbw => m.algbw,
                        Metric::Busbw => m.busbw,
                    };
                    let size = row.size as f64;
                    (size > 0.0 && value > 0.0 && value.is_finite()).then_some((size, value))
                })
                .collect();
            if points.is_empty() {
                continue;
            }
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            series.push(Series {
                name: series_name(layer, mode),
                color,
                mode,
                points,
            });
        }
    }
    series
}

/// A byte count for an axis label: `8`, `64K`, `128M`, `1G` (powers of 1024).
pub fn bytes_label(bytes: f64) -> String {
    const UNITS: [(&str, f64); 4] = [
        ("T", 1024.0 * 1024.0 * 1024.0 * 1024.0),
        ("G", 1024.0 * 1024.0 * 1024.0),
        ("M", 1024.0 * 1024.0),
        ("K", 1024.0),
    ];
    for (unit, scale) in UNITS {
        if bytes >= scale {
            let value = bytes / scale;
            return if (value - value.round()).abs() < 0.05 {
                format!("{}{unit}", value.round())
            } else {
                format!("{value:.1}{unit}")
            };
        }
    }
    format!("{}", bytes.round())
}

/// A bandwidth for an axis label: `0.01`, `1`, `250`, `2e+03`... as short as
/// it stays readable.
pub fn bandwidth_label(gbps: f64) -> String {
    if gbps >= 1.0e4 || (gbps > 0.0 && gbps < 1.0e-2) {
        let text = format!("{gbps:.0e}");
        match text.split_once('e') {
            Some((mantissa, exponent)) if !exponent.starts_with('-') => {
                format!("{mantissa}e+{exponent}")
            }
            _ => text,
        }
    } else {
        crate::report::c_general(gbps)
    }
}

/// A log-axis range around `values`, widened when they are all equal.
fn log_range(values: impl Iterator<Item = f64>, pad: f64) -> Option<(f64, f64)> {
    let (mut low, mut high) = (f64::INFINITY, 0.0f64);
    for value in values {
        low = low.min(value);
        high = high.max(value);
    }
    if !(low.is_finite() && low > 0.0) {
        return None;
    }
    Some((low / pad, high * pad))
}

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
];

const PANEL_HEIGHT: u32 = 420;
const WIDTH: u32 = 1400;

type PlotResult<T> = Result<T, String>;

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    rows: &[Row],
    collective: &str,
    metric: Metric,
) -> PlotResult<()> {
    let series = panel_series(rows, collective, metric);
    let caption = format!("{collective}: {} (GB/s) vs size (B)", metric.name());
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let (Some((x_low, x_high)), Some((y_low, y_high))) = (log_range(xs, 1.2), log_range(ys, 1.5))
    else {
        area.draw(&Text::new(
            caption,
            (40, 20),
            ("sans-serif", 18).into_font(),
        ))
        .map_err(|e| e.to_string())?;
        area.draw(&Text::new(
            format!(
                "no positive {} to draw on a log axis (busbw is 0 at world size 1)",
                metric.name()
            ),
            (40, 60),
            ("sans-serif", 14).into_font(),
        ))
        .map_err(|e| e.to_string())?;
        return Ok(());
    };
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (x_low..x_high).log_scale().base(4.0),
            (y_low..y_high).log_scale(),
        )
        .map_err(|e| e.to_string())?;
    let x_label = |v: &f64| bytes_label(*v);
    let y_label = |v: &f64| bandwidth_label(*v);
    chart
        .configure_mesh()
        .x_desc("size (bytes)")
        .y_desc(format!("{} (GB/s)", metric.name()))
        .x_label_formatter(&x_label)
        .y_label_formatter(&y_label)
        .draw()
        .map_err(|e| e.to_string())?;
    for s in &series {
        let color = COLORS[s.color % COLORS.len()];
        let style = color.stroke_width(2);
        let points = s.points.clone();
        let drawn = match s.mode {
            Mode::OutOfPlace => chart.draw_series(LineSeries::new(points, style)),
            Mode::InPlace => chart.draw_series(DashedLineSeries::new(points, 8, 5, style)),
        }
        .map_err(|e| e.to_string())?;
        let dashed = s.mode == Mode::InPlace;
        drawn.label(s.name.as_str()).legend(move |(x, y)| {
            let end = if dashed { x + 10 } else { x + 20 };
            PathElement::new(vec![(x, y), (end, y)], style)
        });
        chart
            .draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())?;
    Ok(())
}

fn draw(path: &Path, rows: &[Row], title: &str) -> PlotResult<()> {
    let names = collectives(rows);
    let panels_high = names.len().max(1);
    let height = PANEL_HEIGHT * panels_high as u32 + 40;
    let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let body = root
        .titled(title, ("sans-serif", 22))
        .map_err(|e| e.to_string())?;
    let panels = body.split_evenly((panels_high, 2));
    for (index, collective) in names.iter().enumerate() {
        for (column, metric) in [Metric::Algbw, Metric::Busbw].into_iter().enumerate() {
            draw_panel(&panels[index * 2 + column], rows, collective, metric)?;
        }
    }
    root.present().map_err(|e| e.to_string())
}

/// The distinct values of `values`, in order of first appearance, joined
/// by commas.
fn distinct<T: PartialEq + ToString>(values: impl Iterator<Item = T>) -> String {
    let mut seen: Vec<T> = Vec::new();
    for value in values {
        if !seen.contains(&value) {
            seen.push(value);
        }
    }
    seen.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The plot's title, from its rows: `nccl-perf <layers>: <types> world
/// <ranks>`, the layers `B vs A` for `--compare`'s rows, and the CUDA
/// graph replays of `-G` after them.
pub fn title(rows: &[Row]) -> String {
    let layers = match rows.iter().find_map(|row| Some((row.layer, row.ratio?))) {
        Some((subject, ratio)) => format!("{subject} vs {}", ratio.baseline),
        None => distinct(rows.iter().map(|row| row.layer)),
    };
    let graph = match rows.iter().map(|row| row.graph).max() {
        Some(replays) if replays > 0 => format!(" (CUDA graph x{replays})"),
        _ => String::new(),
    };
    format!(
        "nccl-perf {layers}: {} world {}{graph}",
        distinct(rows.iter().map(|row| row.dtype)),
        distinct(rows.iter().map(|row| row.world_size))
    )
}

/// Draws `rows` (any layers and collectives) to `path` as SVG under their
/// [`title`].
///
/// # Errors
/// [`BenchError::Plot`] when the file cannot be written.
pub fn write_svg(path: &Path, rows: &[Row]) -> Result<(), BenchError> {
    draw(path, rows, &title(rows)).map_err(|message| BenchError::Plot {
        path: path.display().to_string(),
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests as fixture;

    /// A checked sum row of floats at world size 1, without the tensor
    /// layer's in-place all_gather.
    fn row(collective: &'static str, layer: &'static str, size: u64, busbw: f64) -> Row {
        let m = |time_us: f64| fixture::m(time_us, size as f64 / 1.0e3 / time_us, busbw, Some(0));
        Row {
            collective,
            layer,
            in_place: (collective != "all_gather" || layer != "tensor").then(|| m(0.3)),
            ..fixture::row(size, size as usize / 4, "sum", -1, m(6.0), m(0.3))
        }
    }

    fn rows() -> Vec<Row> {
        let mut rows = Vec::new();
        for size in [0u64, 8, 64, 512, 4096, 1 << 20] {
            for layer in ["raw", "tensor"] {
                rows.push(row("all_reduce", layer, size, 0.0));
                rows.push(row("all_gather", layer, size, size as f64 / 1.0e4));
            }
        }
        rows
    }

    #[test]
    fn series_per_layer_and_mode() {
        let rows = rows();
        assert_eq!(collectives(&rows), vec!["all_reduce", "all_gather"]);
        let series = panel_series(&rows, "all_reduce", Metric::Algbw);
        let names: Vec<&str> = series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "raw out-of-place",
                "raw in-place",
                "tensor out-of-place",
                "tensor in-place"
            ]
        );
        // The zero size is left out of the log axis.
        assert!(series.iter().all(|s| s.points.len() == 5));
        assert_eq!(series[2].color, 1);
        // busbw 0 everywhere: nothing to draw.
        assert!(panel_series(&rows, "all_reduce", Metric::Busbw).is_empty());
        // The tensor layer has no in-place all_gather.
        let gather = panel_series(&rows, "all_gather", Metric::Busbw);
        assert_eq!(gather.len(), 3);
        assert!(!gather.iter().any(|s| s.name == "tensor in-place"));
    }

    #[test]
    fn bandwidth_labels() {
        assert_eq!(bandwidth_label(1.0e6), "1e+6");
        assert_eq!(bandwidth_label(0.001), "1e-3");
        assert_eq!(bandwidth_label(250.0), "250");
        assert_eq!(bandwidth_label(0.5), "0.5");
    }

    #[test]
    fn byte_labels() {
        assert_eq!(bytes_label(8.0), "8");
        assert_eq!(bytes_label(1024.0), "1K");
        assert_eq!(bytes_label(1536.0), "1.5K");
        assert_eq!(bytes_label(128.0 * 1024.0 * 1024.0), "128M");
        assert_eq!(bytes_label(1024.0 * 1024.0 * 1024.0), "1G");
    }

    #[test]
    fn writes_an_svg_naming_every_series() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bw.svg");
        write_svg(&path, &rows()).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(200)]);
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("xmlns=\"http://www.w3.org/2000/svg\""));
        for name in [
            "raw out-of-place",
            "raw in-place",
            "tensor out-of-place",
            "tensor in-place",
            "nccl-perf raw,tensor: float world 1",
            "all_reduce: algbw (GB/s) vs size (B)",
            "all_gather: busbw (GB/s) vs size (B)",
            "no positive busbw",
        ] {
            assert!(svg.contains(name), "the SVG lacks {name:?}");
        }
        assert!(svg.contains("<polyline") || svg.contains("<path"));
    }

    #[test]
    fn an_unwritable_path_is_an_error() {
        let error = write_svg(Path::new("/nonexistent-dir/for/sure/bw.svg"), &rows()).unwrap_err();
        assert_eq!(error.exit_code(), 1);
        assert!(
            error
                .to_string()
                .starts_with("cannot draw the plot /nonexistent-dir")
        );
    }

    #[test]
    fn empty_rows_still_make_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("empty.svg");
        write_svg(&path, &[]).unwrap();
        assert!(std::fs::read_to_string(&path).unwrap().contains("</svg>"));
    }

    #[test]
    fn titles_name_the_layers_types_and_world() {
        let mut rows = rows();
        assert_eq!(title(&rows), "nccl-perf raw,tensor: float world 1");
        // --compare's rows: B vs A; -G's replays; every type.
        let baseline = rows[0].clone();
        for row in rows.iter_mut().filter(|row| row.layer == "tensor") {
            row.ratio = Some(crate::report::Ratio::between(&baseline, row));
            row.graph = 100;
            row.dtype = "half";
        }
        assert_eq!(
            title(&rows),
            "nccl-perf tensor vs raw: float,half world 1 (CUDA graph x100)"
        );
        assert_eq!(title(&[]), "nccl-perf :  world ");
    }
}
