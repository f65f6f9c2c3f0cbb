# Sourced by the device call scripts: install the carried wheels (.whl: xgboost-cpu, dask, ...)
# into /tmp/site and put them and this checkout on PYTHONPATH; LOG is the call's log in $OUT.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
LOG=$OUT/call.log
