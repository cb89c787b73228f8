// Times ONNX Runtime's CPU build on a model (bench/onnx_bench): the first inference of a new
// session at batch 1 (session creation included) and the median of REPS runs at each batch size,
// each input (N, ...dims after the batch axis) filled with ones (a bool mask with false).
//
//   node tools/ort/bench.js MODEL.onnx THREADS REPS BATCHES INPUTS
//
// BATCHES comma-separated ("1,32"); INPUTS a JSON list [[name, "float32" | "bool", [dims]]];
// prints {"first_ms": float, "ms": {batch: float}, "version": str}.
const path = require('path');
const ort = require(path.join(__dirname, 'node_modules', 'onnxruntime-node'));

function median(values) {
  values.sort((a, b) => a - b);
  return values[Math.floor(values.length / 2)];
}

async function main() {
  const [model, threads, reps, batches, inputs] = process.argv.slice(2);
  const options = {intraOpNumThreads: Number(threads), interOpNumThreads: 1, logSeverityLevel: 3};
  const feedsAt = (b) => {
    const feeds = {};
    for (const [name, dtype, dims] of JSON.parse(inputs)) {
      const shape = [b, ...dims];
      const n = shape.reduce((x, y) => x * y, 1);
      feeds[name] = dtype === 'bool' ? new ort.Tensor('bool', new Uint8Array(n), shape) :
                                       new ort.Tensor('float32', new Float32Array(n).fill(1), shape);
    }
    return feeds;
  };
  let start = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(model, options);
  let feeds = feedsAt(1);
  await session.run(feeds);
  const first = Number(process.hrtime.bigint() - start) / 1e6;
  const ms = {};
  for (const b of batches.split(',').map(Number)) {
    feeds = feedsAt(b);
    await session.run(feeds);  // warm up
    const times = [];
    for (let r = 0; r < Number(reps); ++r) {
      start = process.hrtime.bigint();
      await session.run(feeds);
      times.push(Number(process.hrtime.bigint() - start) / 1e6);
    }
    ms[b] = median(times);
  }
  const version =
      require(path.join(__dirname, 'node_modules', 'onnxruntime-node', 'package.json')).version;
  process.stdout.write(JSON.stringify({first_ms: first, ms, version}) + '\n');
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack || e) + '\n');
  process.exit(1);
});
