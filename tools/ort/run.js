// Runs an ONNX model with ONNX Runtime's CPU build (npm's onnxruntime-node, which tools/setup.sh
// installs beside this file): the reference of tests/onnx_import_test.cc and bench/.
//
//   node tools/ort/run.js MODEL.onnx INPUT.json [THREADS]
//
// INPUT.json holds {"input": [floats], "input_shape": [dims]} for the model's first input, or
// {"inputs": {NAME: {"values": [...], "shape": [dims], "dtype": "float32" | "bool" | "int64"}}}
// for each input by name; prints
// {"output": [floats], "dims": [dims], "version": "1.30.0"} of its first output on stdout, and
// exits 1 with the error on stderr.
const fs = require('fs');
const path = require('path');
const ort = require(path.join(__dirname, 'node_modules', 'onnxruntime-node'));

async function main() {
  const [model, inputJson, threads] = process.argv.slice(2);
  const j = JSON.parse(fs.readFileSync(inputJson));
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: Number(threads || 1),
    interOpNumThreads: 1,
    logSeverityLevel: 3,  // errors only: its warnings would go to stdout beside the result
  });
  const feeds = {};
  if (j.inputs) {
    const arrays = {float32: Float32Array, bool: Uint8Array, int64: BigInt64Array};
    for (const [name, v] of Object.entries(j.inputs)) {
      const values = v.dtype === 'int64' ? v.values.map(BigInt) : v.values;
      feeds[name] = new ort.Tensor(v.dtype, arrays[v.dtype].from(values), v.shape);
    }
  } else {
    feeds[session.inputNames[0]] =
        new ort.Tensor('float32', Float32Array.from(j.input), j.input_shape);
  }
  const result = await session.run(feeds);
  const out = result[session.outputNames[0]];
  const version = require(path.join(__dirname, 'node_modules', 'onnxruntime-node', 'package.json'))
                      .version;
  process.stdout.write(
      JSON.stringify({output: Array.from(out.data), dims: out.dims.map(Number), version}) + '\n');
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack || e) + '\n');
  process.exit(1);
});
