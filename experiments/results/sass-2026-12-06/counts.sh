#!/usr/bin/env bash
# Reproduces counts.txt from the listings (see README.md for how they were made).
# FA=FA4 listing, D=detfuse ps1 listing, P=detfuse pp1 listing. Addresses are of these exact builds.
set -u
H=$(cd "$(dirname "$0")" && pwd)
FA=${FA:-/tmp/fa4_sass/out/fa4_fwd_d128.sass}
D=${D:-/tmp/fa4x/det/fwd_d128_bc128_st2_ov2_ps1_rd1_ot1.sass}
P=${P:-/tmp/fa4x/det/fwd_d128_bc128_st2_ov1_pp1_rd1_ot1.sass}
for f in $FA $D $P; do echo "### $f"; python3 $H/sass_loops.py $f; done
echo "### paths (fast path: trywait succeeds first time, no softcap)"
python3 $H/path.py $FA "FA4 unmasked step" 5ec0-7c50 -x 5f60-5f90 6290-62a0
python3 $H/path.py $FA "FA4 masked step (0 iterations at this shape)" 3ad0-5e00 -x 3b70-3ba0 3dc0-3dd0
python3 $H/path.py $D "det ps1 unmasked step" 5b40-66e0 7b10-7bc0 8c10-9e10
python3 $H/path.py $D "det ps1 masked step (0 iterations at this shape)" 5b40-66e0 7b10-7bc0 7bd0-8c00 8c10-9e10
python3 $H/path.py $D "det ps1 mask block" 7bd0-8c00
python3 $H/path.py $D "det ps1 softcap block (skipped)" 66f0-7b00
python3 $H/path.py $D "det ps1 end_turn (wait0, rescale O, to_p)" 5b80-61c0
python3 $H/path.py $P "det pp1 unmasked step" 4ba0-5110 6540-65c0 7600-8e40
python3 $H/path.py $P "det pp1 masked step" 4ba0-5110 6540-65c0 65d0-75f0 7600-8e40
echo "### per tile, outside the step loop"
python3 $H/path.py $FA "FA4 consumer setup" 1450-1e00
python3 $H/path.py $FA "FA4 first (diagonal) block" 1e10-3ac0
python3 $H/path.py $FA "FA4 between loops" 5e10-5eb0
python3 $H/path.py $FA "FA4 epilogue (last PV, normalise, STSM, TMA store)" 7c60-8be0
python3 $H/path.py $D "det ps1 tile head (static, both scheduler branches)" cd0-1b50
python3 $H/path.py $D "det ps1 first (diagonal) block, softcap excluded" 1b60-5b30 -x 1f70-3380
python3 $H/path.py $D "det ps1 first-block mask" 3440-4470
python3 $H/path.py $D "det ps1 epilogue (static; end_turn, last PV, LSE, ST.E, TMA store)" 9e20-c6c0
echo "### critical stretches"
python3 $H/path.py $FA "FA4 wait1 -> wait0" 6490-6ee0
python3 $H/path.py $FA "FA4 wait0 -> loop end" 6ef0-7c50
python3 $H/path.py $FA "FA4 loop top -> first QK HGMMA" 5ec0-6070 -x 5f60-5f90
python3 $H/path.py $D "det ps1 wait1 -> first FMNMX" 66a0-66e0 7b10-7bc0
python3 $H/path.py $D "det ps1 wait0 -> first QK HGMMA" 5b90-6340
python3 $H/path.py $P "det pp1 wait1 -> first FMNMX" 50d0-5110 6540-65c0
