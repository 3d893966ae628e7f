package main

import (
	"fmt"
	"image/color"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// writePlot draws throughput (MB/s, medians) against the epoch interval for
// kafka_eos, the plain idempotent output and ProducerPerformance, one line
// per contender and record size, into a PNG.
func writePlot(path string, cells []*cell) error {
	p := plot.New()
	p.Title.Text = "Produce throughput vs epoch interval (median MB/s)"
	p.X.Label.Text = "epoch (transaction) interval, ms (log scale)"
	p.Y.Label.Text = "MB/s of record values"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())

	sizes := map[int]bool{}
	for _, c := range cells {
		sizes[c.size] = true
	}
	var sizeList []int
	for s := range sizes {
		sizeList = append(sizeList, s)
	}
	sort.Ints(sizeList)

	styles := map[string]int{cEOS: 0, cPlain: 1, cPP: 2}
	for si, size := range sizeList {
		for _, name := range []string{cEOS, cPlain, cPP} {
			var pts plotter.XYs
			for _, c := range cells {
				if c.size != size {
					continue
				}
				v, n := c.med(name, func(r result) float64 { return r.MBPerSec(c.size) })
				if n > 0 {
					pts = append(pts, plotter.XY{X: float64(c.interval.Milliseconds()), Y: v})
				}
			}
			if len(pts) == 0 {
				continue
			}
			sort.Slice(pts, func(i, j int) bool { return pts[i].X < pts[j].X })
			l, s, err := plotter.NewLinePoints(pts)
			if err != nil {
				return err
			}
			col := plotutil.Color(styles[name])
			l.Color, s.Color = col, col
			l.Width = vg.Points(1.5)
			if si > 0 {
				l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
			}
			s.Shape = plotutil.Shape(si)
			s.Radius = vg.Points(3)
			p.Add(l, s)
			p.Legend.Add(fmt.Sprintf("%s, %s", name, sizeLabel(size)), l, s)
		}
	}
	// Room above the lines for the legend.
	p.Y.Min = 0
	p.Y.Max *= 1.45
	p.Legend.ThumbnailWidth = vg.Points(24)
	p.BackgroundColor = color.White
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}
