# Shared by scripts/record/samples.sh, advise.sh and autograd.sh (source it; they set OUT, TMP,
# PYTHON and IMPORTER). Nsight Systems 2022.4 often cannot find its importer after profiling; then
# QdstrmImporter turns the .qdstrm into .nsys-rep, and `nsys export` writes the SQLite database.

# record NAME TRACES COMMAND...: COMMAND under `nsys profile -t TRACES`, exported to $OUT/NAME.sqlite.
# A clean environment keeps the user's variables out of TARGET_INFO_SYSTEM_ENV (a committed file);
# with OS runtime traced, the thresholds drop the thousands of sub-0.1 ms calls `import torch` makes.
record() {
  local name=$1 traces=$2
  shift 2
  local rep="$TMP/$name" osrt=()
  if [[ $traces == *osrt* ]]; then
    osrt=(--osrt-threshold=100000 --osrt-backtrace-threshold=10000000000)
  fi
  env -i PATH="$PATH" HOME="$TMP" LANG=C.UTF-8 \
    nsys profile -t "$traces" --sample=none --cpuctxsw=none "${osrt[@]}" -f true -o "$rep" "$@" || true
  if [ ! -f "$rep.nsys-rep" ]; then
    "$IMPORTER" -i "$rep.qdstrm"
  fi
  rm -f "$OUT/$name.sqlite"
  nsys export --type sqlite -o "$OUT/$name.sqlite" "$rep.nsys-rep" >/dev/null
  ls -l "$OUT/$name.sqlite"
}
