#!/usr/bin/env python3
# The fit marks and peak GB of docs/comparison.md against `weipipe simulate` (its memory model,
# schedule/memory.c mem_predict) without rerunning compare_strategies.sh's searches: each row's
# strategy and knobs simulated alone under its section's command. Prints old -> new per row and a
# FLIP line per changed verdict; `check_fits.py write [WEIPIPE]` also rewrites the two cells.
import re, subprocess, sys, shlex
here = __import__('os').path.dirname(__import__('os').path.abspath(__file__)) + '/..'
W = sys.argv[2] if len(sys.argv) > 2 else here + '/build/weipipe'
doc = open(here + '/docs/comparison.md').read().split('\n')
cmd = None
out = []
changes = []
for ln in doc:
    m = re.match(r'^`weipipe simulate --strategy auto (.*) --format csv`$', ln)
    if m:
        cmd = shlex.split(m.group(1))
    if cmd is not None and ln.startswith('| ') and not ln.startswith('| strategy') and not ln.startswith('| ---') and '`--' in ln and len(ln.split(' | ')) >= 8:
        cells = ln.split(' | ')
        # cells: 0 '| name', 1 tok/s, 2 vs, 3 bubble, 4 GB sent, 5 peak, 6 fit, 7 knobs, 8 paper
        S = cells[0][2:].strip()
        knobs = shlex.split(re.search(r'`([^`]*)`', cells[7]).group(1))
        r = subprocess.run([W, 'simulate', '--strategy', S] + cmd + knobs + ['--format', 'csv'], capture_output=True, text=True)
        rows = [l.split(',') for l in r.stdout.strip().split('\n')]
        if r.returncode or len(rows) < 2:
            print('ERR', S, cmd, knobs, r.stderr.strip()[-300:]); out.append(ln); continue
        hdr, row = rows[0], rows[1]
        d = dict(zip(hdr, row))
        peak = float(d['peak_bytes_per_rank']) / 1e9
        fits = d['fits'] == 'true'
        old_peak, old_fit = cells[5].strip(), cells[6].strip()
        new_fit = 'fits' if fits else '**does not fit**'
        if (old_fit == 'fits') != fits:
            changes.append('FLIP %s %s: %s -> %s (peak %s -> %.2f)' % (' '.join(cmd), S, old_fit, new_fit, old_peak, peak))
        cells[5] = '%.2f' % peak
        cells[6] = new_fit
        print('%-60s %-20s peak %8s -> %8.2f  %s -> %s  tok/s doc %s sim %.0f' % (' '.join(cmd)[:60], S, old_peak, peak, old_fit, new_fit, cells[1], float(d['tokens_per_s'])))
        ln = ' | '.join(cells)
    out.append(ln)
if len(sys.argv) > 1 and sys.argv[1] == 'write':
    open(here + '/docs/comparison.md', 'w').write('\n'.join(out))
print('\n'.join(changes))
