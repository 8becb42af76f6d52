#!/bin/sh
# Mutation score of the core packages, for `make mutation`: gremlins
# ($GREMLINS) over each package's own tests, then each package's
# caught/total. gremlins runs only mutants inside code the coverage
# reaches, so never one of a constant: every constant of a file in $CONSTS
# (package:file) gets a mutant of its own instead (a number +1, a string
# +"x"), compiled in with `go test -overlay` so the work tree is never
# touched. A package with timed-out mutants is run once more with ten
# times the allowance; those that still time out count as caught and are
# listed, so that each can be checked to really hang.
set -eu
# A cached coverage run would make gremlins time every mutant out.
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-count=1"
: "${GREMLINS:?set GREMLINS to the gremlins command}"
: "${GO:=go}"
: "${PKGS:?set PKGS to the packages}"
: "${CONSTS:=}"
# Files gremlins leaves alone, per package (package:regexp of base names).
: "${EXCLUDE:=}"
work=$(mktemp -d "${TMPDIR:-/tmp}/commandcore-mutation.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$(pwd)

# field NAME FILE: the number after "NAME: " in a gremlins summary.
field() { sed -n "s/.*$1: \([0-9][0-9]*\).*/\1/p" "$2" | head -n 1; }

# constants PKG FILE GREMLINS-OUTPUT: one mutant per constant declared in
# a const block of FILE; prints "caught total uncovered", uncovered being
# the mutants gremlins found on those lines and could not run.
constants() {
	src=$root/$1/$2
	lines=$(awk '/^const \($/ {c=1; next} c && /^\)$/ {c=0} c && /^\t[A-Z][A-Za-z0-9_]*( +[A-Za-z.]+)? *= / {print NR}' "$src")
	caught=0 total=0 uncovered=0
	for n in $lines; do
		uncovered=$((uncovered + $(grep -c "^ *NOT COVERED .* at $2:$n:" "$3" || true)))
		awk -v n="$n" 'NR == n {
			i = index($0, "= "); lhs = substr($0, 1, i + 1); rhs = substr($0, i + 2)
			if (substr(rhs, 1, 1) == "\"") $0 = lhs rhs " + \"x\""; else $0 = lhs "(" rhs ") + 1"
		} { print }' "$src" >"$work/mutant.go"
		printf '{"Replace":{"%s":"%s"}}' "$src" "$work/mutant.go" >"$work/overlay.json"
		what="constant $2:$n:$(sed -n "${n}p" "$src" | tr -s '\t ' ' ')"
		if $GO test -count=1 -overlay "$work/overlay.json" "./$1/" >"$work/const.log" 2>&1; then
			echo "  LIVED $what" >&2
			total=$((total + 1))
		elif grep -q '\[build failed\]' "$work/const.log"; then
			echo "  NOT VIABLE $what" >&2
		else
			caught=$((caught + 1)) total=$((total + 1))
		fi
	done
	echo "$caught $total $uncovered"
}

# unleash PKG EXCLUDE COEFFICIENT OUT: one gremlins run over PKG's tests.
unleash() {
	flags="--workers 1 --timeout-coefficient $3 --invert-logical --invert-loopctrl"
	if [ -n "$2" ]; then
		$GREMLINS unleash $flags -E "$2" "./$1" >"$4" 2>&1 || true
	else
		$GREMLINS unleash $flags "./$1" >"$4" 2>&1 || true
	fi
	if [ -z "$(field Killed "$4")" ]; then
		cat "$4" >&2
		echo "gremlins failed on $1" >&2
		exit 1
	fi
}

printf '%s\n' "package caught/total score timed_out" >"$work/table"
for pkg in $PKGS; do
	name=${pkg##*/}
	caught=0 total=0 timedout=0
	ex=$(printf '%s\n' $EXCLUDE | sed -n "s|^$pkg:||p")
	echo "== $pkg" >&2
	unleash "$pkg" "$ex" 3 "$work/$name.txt"
	if [ "$(field 'Timed out' "$work/$name.txt")" != 0 ]; then
		# A loaded machine times out mutants that do not hang: only those
		# that still time out with ten times the allowance count.
		echo "  timed out: once more with --timeout-coefficient 10" >&2
		unleash "$pkg" "$ex" 10 "$work/$name.txt"
	fi
	grep -E '^ *(LIVED|TIMED OUT|NOT COVERED) ' "$work/$name.txt" >&2 || true
	k=$(field Killed "$work/$name.txt") l=$(field Lived "$work/$name.txt")
	u=$(field 'Not covered' "$work/$name.txt") t=$(field 'Timed out' "$work/$name.txt")
	caught=$((k + t)) total=$((k + l + u + t)) timedout=$t
	for c in $CONSTS; do
		[ "${c%%:*}" = "$pkg" ] || continue
		set -- $(constants "$pkg" "${c#*:}" "$work/$name.txt")
		caught=$((caught + $1)) total=$((total + $2 - $3))
	done
	if [ "$total" -gt 0 ]; then
		score="$((caught * 100 / total))%"
	else
		score="-"
	fi
	printf '%s %s/%s %s %s\n' "$pkg" "$caught" "$total" "$score" "$timedout" >>"$work/table"
done
column -t "$work/table"
