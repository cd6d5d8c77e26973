package main

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Size of one row of the chart: the goodput panel, the failed calls panel
// and the legend.
const (
	chartPanelWidth  = 12 * vg.Centimeter
	chartLegendWidth = 5 * vg.Centimeter
	chartRowHeight   = 8 * vg.Centimeter
)

// writeChart draws the medians of sums as a PNG in path: a row per workload
// and driver, with goodput (commits/s) and failed calls (% of calls) against
// the process count, a line per runner. A runner with a fixed worker count
// (serial) ran in one process only: its value is drawn as a dashed line
// across the spreads.
func writeChart(path string, sums []summary) error {
	goodput, failed := metricByCol("goodput_tps"), metricByCol("fail_pct")
	var panels [][]*plot.Plot // per workload and driver: goodput, failed calls
	var legends []*plot.Plot
	for _, g := range groups(sums) {
		var procs []int
		for _, s := range g {
			if !slices.Contains(procs, s.procs) {
				procs = append(procs, s.procs)
			}
		}
		slices.Sort(procs)
		title := g[0].workload + " / " + g[0].driver
		gp := newChartPanel(title+": goodput", "commits/s (median)", procs)
		fp := newChartPanel(title+": failed calls", "% of calls (median)", procs)
		legend := plot.New()
		legend.HideAxes()
		legend.Legend.Top, legend.Legend.Left = true, true
		var names []string
		for _, s := range g {
			if !slices.Contains(names, s.runner) {
				names = append(names, s.runner)
			}
		}
		for i, name := range names {
			r, _ := find(allRunners, func(r runner) bool { return r.name == name })
			var thumbs []plot.Thumbnailer
			for _, panel := range []struct {
				p *plot.Plot
				m metric
			}{{gp, goodput}, {fp, failed}} {
				var pts plotter.XYs
				for _, s := range g {
					if v := s.median(panel.m); s.runner == name && !math.IsNaN(v) {
						pts = append(pts, plotter.XY{X: float64(s.procs), Y: v})
					}
				}
				if len(pts) == 0 {
					continue
				}
				line := pts
				if r.workers > 0 {
					line = plotter.XYs{{X: float64(procs[0]), Y: pts[0].Y}, {X: float64(procs[len(procs)-1]), Y: pts[0].Y}}
				}
				l, err := plotter.NewLine(line)
				if err != nil {
					return fmt.Errorf("chart: %w", err)
				}
				sc, err := plotter.NewScatter(pts)
				if err != nil {
					return fmt.Errorf("chart: %w", err)
				}
				l.Color, sc.Color = plotutil.Color(i), plotutil.Color(i)
				l.Width = vg.Points(1.5)
				if r.workers > 0 {
					l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
				}
				sc.Shape = plotutil.Shape(i)
				panel.p.Add(l, sc)
				thumbs = []plot.Thumbnailer{l, sc}
			}
			if thumbs != nil {
				legend.Legend.Add(name, thumbs...)
			}
		}
		for _, p := range []*plot.Plot{gp, fp} {
			p.Y.Max = max(p.Y.Max*1.05, 1) // headroom; an axis from 0 to 1 when all are 0
		}
		panels = append(panels, []*plot.Plot{gp, fp})
		legends = append(legends, legend)
	}
	if len(panels) == 0 {
		return fmt.Errorf("chart: no results")
	}

	n := len(panels)
	img := vgimg.New(2*chartPanelWidth+chartLegendWidth, vg.Length(n)*chartRowHeight)
	dc := draw.New(img)
	tiles := func(cols int) draw.Tiles {
		return draw.Tiles{Rows: n, Cols: cols, PadX: 8 * vg.Millimeter, PadY: 10 * vg.Millimeter,
			PadTop: 4 * vg.Millimeter, PadBottom: 4 * vg.Millimeter, PadLeft: 4 * vg.Millimeter, PadRight: 4 * vg.Millimeter}
	}
	// The panels, their axes aligned, on the left; the legends on the right.
	canvases := plot.Align(panels, tiles(2), draw.Crop(dc, 0, -chartLegendWidth, 0, 0))
	right := draw.Crop(dc, 2*chartPanelWidth, 0, 0, 0)
	for i := range panels {
		for j, p := range panels[i] {
			p.Draw(canvases[i][j])
		}
		legends[i].Draw(tiles(1).At(right, 0, i))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("chart: %w", err)
	}
	return f.Close()
}

// newChartPanel returns an empty panel with a logarithmic process axis
// ticked at procs and a value axis from 0.
func newChartPanel(title, ylabel string, procs []int) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "processes (workers spread over)"
	p.Y.Label.Text = ylabel
	p.X.Scale = plot.LogScale{}
	ticks := make(plot.ConstantTicks, len(procs))
	for i, n := range procs {
		ticks[i] = plot.Tick{Value: float64(n), Label: strconv.Itoa(n)}
	}
	p.X.Tick.Marker = ticks
	// Room around the extreme spreads on the logarithmic axis.
	p.X.Min, p.X.Max = float64(procs[0])/1.3, float64(procs[len(procs)-1])*1.3
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	return p
}

// metricByCol returns the metric of TSV column col.
func metricByCol(col string) metric {
	m, ok := find(metrics, func(m metric) bool { return m.col == col })
	if !ok {
		panic("no metric " + col)
	}
	return m
}
