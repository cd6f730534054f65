# plot-losses.gp: the loss curves of a regression run (scripts/regress.sh) as
# one PNG: for each model, its runs' training loss against the step, drawn on
# top of each other (the 1-rank reference thick and grey, the others thin and
# dashed: where they agree the lines coincide), and below it each run's
# relative difference from the reference on a log scale.
#
# gnuplot -e "out='losses.png'; models='mlp permute-mlp'; keys='mlp pmlp'; \
#   files_mlp='ref.dat b.dat'; titles_mlp='ref 2-dp'; \
#   files_pmlp='...'; titles_pmlp='...'; heading='...'" plot-losses.gp
# keys: one word per model naming its files_<key> and titles_<key> variables;
# the first file of each model is its reference. Each .dat file holds lines
# "step loss reldiff" (reldiff: relative difference from the reference).

if (!exists("out")) out = "losses.png"
if (!exists("heading")) heading = "meshgrad regression: loss curves"
if (!exists("models")) models = "mlp"
if (!exists("keys")) keys = models
n = words(models)
if (n < 1) exit

set terminal pngcairo size (640 * n), 900 font "sans,9"
set output out
set multiplot layout 2, n title heading
set grid
set key top right font "sans,7" spacing 0.9

do for [i = 1:n] {
    m = word(models, i)
    files = value("files_" . word(keys, i))
    titles = value("titles_" . word(keys, i))
    set title m . ": training loss"
    set xlabel "step"
    set ylabel "loss"
    unset logscale y
    plot word(files, 1) using 1:2 with lines linewidth 6 linecolor rgb "#bbbbbb" \
            title word(titles, 1), \
        for [j = 2:words(files)] word(files, j) using 1:2 with lines \
            dashtype j linewidth 1.2 linecolor j title word(titles, j)
}
do for [i = 1:n] {
    m = word(models, i)
    files = value("files_" . word(keys, i))
    titles = value("titles_" . word(keys, i))
    set title m . ": |relative difference| from the 1-rank reference (tolerance 1e-4)"
    set xlabel "step"
    set ylabel "|loss - ref| / |ref|"
    set logscale y
    set yrange [1e-10:1e-2]
    # zeros (bitwise equal) are drawn at the floor of the axis
    plot for [j = 2:words(files)] word(files, j) using 1:($3 > 1e-10 ? $3 : 1e-10) with lines \
        linecolor j dashtype j title word(titles, j), \
        1e-4 with lines linecolor rgb "red" linewidth 2 dashtype 2 title "tolerance"
    set autoscale y
}
unset multiplot
