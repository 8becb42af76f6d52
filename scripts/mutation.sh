#!/bin/sh
# Mutation score of the core packages, for `make mutation`: gremlins
# ($GREMLINS) over each package's own tests, then each package's
# caught/total. gremlins runs only mutants inside code the coverage
# reaches: those it reports NOT COVERED (a switch's case expressions,
# constant declarations) are built here instead, by scripts/mutant with
# gremlins' own replacement table, and every constant of a file in $CONSTS
# (package:file) gets a mutant of its own too (a number +1, a string +"x").
# Both are compiled in with `go test -overlay`, so the work tree is never
# touched; one that does not build is dropped from the total, as gremlins
# drops its NOT VIABLE ones. A package with timed-out mutants is run once
# more with ten times the allowance; those that still time out count as
# caught and are listed, so that each can be checked to really hang.
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
$GO build -o "$work/mutant" ./scripts/mutant

# field NAME FILE: the number after "NAME: " in a gremlins summary.
field() { sed -n "s/.*$1: \([0-9][0-9]*\).*/\1/p" "$2" | head -n 1; }

# trial PKG SRC WHAT: the package's tests with $work/mutant.go in place of
# SRC; adds the outcome to caught, total and timedout, and names every
# mutant that is not killed.
trial() {
	printf '{"Replace":{"%s":"%s"}}' "$2" "$work/mutant.go" >"$work/overlay.json"
	if $GO test -count=1 -failfast -timeout "$allowance" -overlay "$work/overlay.json" "./$1/" </dev/null >"$work/trial.log" 2>&1; then
		echo "  LIVED $3" >&2
		total=$((total + 1))
	elif grep -q '\[build failed\]' "$work/trial.log"; then
		echo "  NOT VIABLE $3" >&2
	elif grep -q '^panic: test timed out after' "$work/trial.log"; then
		echo "  TIMED OUT $3" >&2
		caught=$((caught + 1)) total=$((total + 1)) timedout=$((timedout + 1))
	else
		caught=$((caught + 1)) total=$((total + 1))
	fi
}

# uncovered PKG GREMLINS-OUTPUT: every mutant gremlins found in PKG's own
# files and did not run, run here; counts them also in ucaught and utotal.
uncovered() {
	sed -n 's/^ *NOT COVERED \([A-Z_]*\) at \(.*\):\([0-9]*\):\([0-9]*\)$/\1 \2 \3 \4/p' "$2" >"$work/uncovered"
	while read -r kind file line col; do
		# gremlins walks the package's subdirectories too, but they are
		# packages of their own, with tests of their own (or none): their
		# mutants are no measure of this package's tests.
		case $file in
		*/*)
			echo "  NOT MEASURED $kind at $file:$line:$col (another package)" >&2
			continue
			;;
		esac
		"$work/mutant" "$kind" "$root/$1/$file" "$line" "$col" >"$work/mutant.go"
		c=$caught t=$total
		trial "$1" "$root/$1/$file" "(uncovered) $kind at $file:$line:$col"
		ucaught=$((ucaught + caught - c)) utotal=$((utotal + total - t))
	done <"$work/uncovered"
}

# constants PKG FILE: one mutant per constant declared in a const block
# of FILE.
constants() {
	src=$root/$1/$2
	lines=$(awk '/^const \($/ {c=1; next} c && /^\)$/ {c=0} c && /^\t[A-Z][A-Za-z0-9_]*( +[A-Za-z.]+)? *= / {print NR}' "$src")
	for n in $lines; do
		awk -v n="$n" 'NR == n {
			i = index($0, "= "); lhs = substr($0, 1, i + 1); rhs = substr($0, i + 2)
			if (substr(rhs, 1, 1) == "\"") $0 = lhs rhs " + \"x\""; else $0 = lhs "(" rhs ") + 1"
		} { print }' "$src" >"$work/mutant.go"
		trial "$1" "$src" "constant $2:$n:$(sed -n "${n}p" "$src" | tr -s '\t ' ' ')"
	done
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

printf '%s\n' "package caught/total score timed_out uncovered_caught/run" >"$work/table"
for pkg in $PKGS; do
	name=${pkg##*/}
	ex=$(printf '%s\n' $EXCLUDE | sed -n "s|^$pkg:||p")
	echo "== $pkg" >&2
	# The unmutated tests must pass; ten times their time is the
	# allowance of each mutant run here, as gremlins' second run.
	start=$(date +%s)
	if ! $GO test -count=1 "./$pkg/" >"$work/trial.log" 2>&1; then
		cat "$work/trial.log" >&2
		echo "the tests of $pkg fail unmutated" >&2
		exit 1
	fi
	allowance=$(( ($(date +%s) - start + 1) * 10 ))s
	unleash "$pkg" "$ex" 3 "$work/$name.txt"
	if [ "$(field 'Timed out' "$work/$name.txt")" != 0 ]; then
		# A loaded machine times out mutants that do not hang: only those
		# that still time out with ten times the allowance count.
		echo "  timed out: once more with --timeout-coefficient 10" >&2
		unleash "$pkg" "$ex" 10 "$work/$name.txt"
	fi
	grep -E '^ *(LIVED|TIMED OUT) ' "$work/$name.txt" >&2 || true
	k=$(field Killed "$work/$name.txt") l=$(field Lived "$work/$name.txt")
	t=$(field 'Timed out' "$work/$name.txt")
	caught=$((k + t)) total=$((k + l + t)) timedout=$t ucaught=0 utotal=0
	uncovered "$pkg" "$work/$name.txt"
	for c in $CONSTS; do
		[ "${c%%:*}" = "$pkg" ] || continue
		constants "$pkg" "${c#*:}"
	done
	if [ "$total" -gt 0 ]; then
		score="$((caught * 100 / total))%"
	else
		score="-"
	fi
	printf '%s %s/%s %s %s %s/%s\n' "$pkg" "$caught" "$total" "$score" "$timedout" "$ucaught" "$utotal" >>"$work/table"
done
column -t "$work/table"
