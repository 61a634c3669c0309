// Reproduces one failing result with onnxruntime-web alone. repro.json lists the sessions to
// create, in the order the suite created them ("steps"), and each model with its inputs and
// onnxruntime CPU's outputs ("workloads"); the last step is the one judged, as the suite judges
// it: every run against eager's run of the same inputs and against onnxruntime CPU, against
// earlier layouts' outputs, against earlier runs' inputs (a stale input) and other graphs' (a
// wrong graph), replays against each other, and whether replays still create bind groups or
// write uniforms. Each run gets the inputs its workload's `schedule` names, in the GPU buffers
// the step's `buffers` say (the same ones rewritten, or a new one every run), on the graph
// (gpu_graph_id) it names when the step records several.
// Serve the folder (python3 -m http.server) and open index.html; ?faults=off runs the same
// steps without the injected fault(s) a --with-fault bundle carries.

const UNIFORM = 0x40; // GPUBufferUsage.UNIFORM
const TYPED_ARRAYS = {
  float32: Float32Array,
  float16: Uint16Array,
  float64: Float64Array,
  int64: BigInt64Array,
  uint64: BigUint64Array,
  int32: Int32Array,
  uint32: Uint32Array,
  int16: Int16Array,
  uint16: Uint16Array,
  int8: Int8Array,
  uint8: Uint8Array,
  bool: Uint8Array,
};

/**
 * The session options, as the suite creates its sessions (its harness.js): the EP as an
 * object, since the C++ EP builds pass enableGraphCapture on only then; capture sessions take
 * GPU-buffer inputs and keep their outputs on the GPU. `epAsString` is the injected fault
 * ep-name-as-string: the EP named 'webgpu', which the C++ builds take without capturing.
 */
const sessionOptions = (workload, mode, epAsString) => ({
  executionProviders: [epAsString ? 'webgpu' : {name: 'webgpu'}],
  freeDimensionOverrides: workload.freeDimensionOverrides,
  ...(mode === 'capture' ? {enableGraphCapture: true, preferredOutputLocation: 'gpu-buffer'} : {}),
});

const lines = [];
const say = (text) => {
  lines.push(text);
  console.log(text);
  document.getElementById('log').textContent = lines.join('\n');
};

// The suite's verdicts, most specific first (repro.json): the first that applies headlines.
let verdictOrder = ['error'];
const faultsOn = FAULTS.length > 0 && new URLSearchParams(location.search).get('faults') !== 'off';

// WebGPU calls counted per run: a replay that creates bind groups or writes uniforms did not
// replay a capture. The injected faults (faults.js) rewrite bind groups through `rewriters`.
const counts = {bindGroups: 0, uniformWrites: 0};
const rewriters = [];
const installCounters = () => {
  const createBindGroup = GPUDevice.prototype.createBindGroup;
  GPUDevice.prototype.createBindGroup = function (descriptor, ...rest) {
    counts.bindGroups++;
    for (const rewrite of rewriters) {
      descriptor = rewrite(this, descriptor);
    }
    return createBindGroup.call(this, descriptor, ...rest);
  };
  const writeBuffer = GPUQueue.prototype.writeBuffer;
  GPUQueue.prototype.writeBuffer = function (buffer, ...rest) {
    if (buffer.usage & UNIFORM) {
      counts.uniformWrites++;
    }
    return writeBuffer.call(this, buffer, ...rest);
  };
};

const fetched = new Map();
const bytes = async (path) => {
  if (!fetched.has(path)) {
    const response = await fetch(path);
    if (!response.ok) {
      throw new Error(`fetching ${path}: HTTP ${response.status}`);
    }
    fetched.set(path, await response.arrayBuffer());
  }
  return fetched.get(path);
};

const tensorFile = async (spec) => ({
  type: spec.type,
  dims: spec.dims,
  data: new TYPED_ARRAYS[spec.type](await bytes(spec.bin)),
});

const float16 = (bits) => {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >> 10) & 0x1f;
  const fraction = bits & 0x3ff;
  if (exponent === 0) {
    return sign * 2 ** -14 * (fraction / 1024);
  }
  if (exponent === 31) {
    return fraction ? NaN : sign * Infinity;
  }
  return sign * 2 ** (exponent - 15) * (1 + fraction / 1024);
};
const numbers = (tensor) => Array.from(tensor.data, tensor.type === 'float16' ? float16 : Number);
const sameDims = (a, b) => a.length === b.length && a.every((d, i) => Number(d) === Number(b[i]));

/** The suite's rule (ORT-web's op-test rule): within `abs`, or a same-sign ratio within rel. */
const compare = (actual, expected, tolerance) => {
  const total = expected.data.length;
  if (!actual || !sameDims(actual.dims, expected.dims)) {
    return {ok: false, maxAbs: Infinity, mismatched: total, total};
  }
  const a = numbers(actual);
  const e = numbers(expected);
  let maxAbs = 0;
  let mismatched = 0;
  for (let i = 0; i < total; i++) {
    const same = a[i] === e[i] || (Number.isNaN(a[i]) && Number.isNaN(e[i]));
    const finite = Number.isFinite(a[i]) && Number.isFinite(e[i]);
    const diff = same ? 0 : finite ? Math.abs(a[i] - e[i]) : Infinity;
    const big = Math.max(Math.abs(a[i]), Math.abs(e[i]));
    const small = Math.min(Math.abs(a[i]), Math.abs(e[i]));
    const ratio = same ? 1 : finite && a[i] * e[i] > 0 ? big / small : Infinity;
    if (!(same || diff <= tolerance.abs || ratio <= 1 + tolerance.rel)) {
      mismatched++;
    }
    maxAbs = Math.max(maxAbs, diff);
  }
  return {ok: mismatched === 0, maxAbs, mismatched, total};
};

/** Each expected output compared; the worst max abs and whether all are within tolerance. */
const compareAll = (actual, expected, tolerance) => {
  const each = Object.fromEntries(
    Object.entries(expected).map(([name, want]) => [name, compare(actual[name], want, tolerance)]),
  );
  const values = Object.values(each);
  return {each, ok: values.every((c) => c.ok), worst: Math.max(0, ...values.map((c) => c.maxAbs))};
};

const identical = (a, b) =>
  Object.keys(a).every((name) => {
    const x = numbers(a[name]);
    const y = numbers(b[name]);
    return x.length === y.length && x.every((v, i) => Object.is(v, y[i]) || v === y[i]);
  });

const byteLength = (spec) =>
  spec.dims.reduce((a, b) => a * b, 1) * TYPED_ARRAYS[spec.type].BYTES_PER_ELEMENT;

/** A GPU buffer on ORT's device for a tensor `spec`. */
const gpuBuffer = (ort, spec) => ort.env.webgpu.device.createBuffer({
  size: Math.ceil(byteLength(spec) / 16) * 16 || 16,
  usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
});

const writeInput = (ort, buffer, data) => {
  const padded = new Uint8Array(buffer.size);
  padded.set(new Uint8Array(data));
  ort.env.webgpu.device.queue.writeBuffer(buffer, 0, padded);
};

/** A pre-allocated output's bytes, copied through a mappable buffer. */
const readOutput = async (ort, buffer, spec) => {
  const device = ort.env.webgpu.device;
  const size = Math.ceil(byteLength(spec) / 4) * 4 || 4;
  const staging = device.createBuffer({size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST});
  const encoder = device.createCommandEncoder();
  encoder.copyBufferToBuffer(buffer, 0, staging, 0, size);
  device.queue.submit([encoder.finish()]);
  await staging.mapAsync(GPUMapMode.READ);
  const data = staging.getMappedRange().slice(0, byteLength(spec));
  staging.unmap();
  staging.destroy();
  return new TYPED_ARRAYS[spec.type](data);
};

/**
 * Graph capture needs its inputs in GPU buffers on ORT's device: each graph's are made on its
 * first run and kept, as an application keeps them, or made again every run with
 * `buffers.inputs` 'fresh'; likewise pre-allocated outputs (`buffers.outputs` not 'none'), typed
 * and shaped as onnxruntime CPU's outputs.
 */
const graphTensors = (ort, entry, workload, step, graph, api) => {
  const known = entry.graphs.get(graph);
  const held = {...known};
  if (!known || step.buffers.inputs === 'fresh') {
    held.inputBuffers = workload.inputs.map((spec) => gpuBuffer(ort, spec));
    api?.inputs(entry.name, graph, held.inputBuffers);
    held.feeds = Object.fromEntries(workload.inputs.map((spec, i) => [
      spec.name, ort.Tensor.fromGpuBuffer(held.inputBuffers[i], {dataType: spec.type, dims: spec.dims})]));
  }
  if (step.buffers.outputs !== 'none' && (!known || step.buffers.outputs === 'fresh')) {
    held.fetches = {};
    held.readers = {};
    for (const spec of workload.cpu) {
      const buffer = gpuBuffer(ort, spec);
      held.readers[spec.name] = () => readOutput(ort, buffer, spec);
      held.fetches[spec.name] = ort.Tensor.fromGpuBuffer(
        buffer, {dataType: spec.type, dims: spec.dims, download: held.readers[spec.name]});
    }
  }
  entry.graphs.set(graph, held);
  return held;
};

/** One run's feeds (and pre-allocated fetches): CPU tensors, or the graph's GPU tensors with
 * the run's inputs written into their buffers (capture). */
const runArguments = async (ort, entry, workload, step, graph, variant, api) => {
  const data = await Promise.all(variant.inputs.map((spec) => bytes(spec.bin)));
  if (step.mode !== 'capture') {
    return {feeds: Object.fromEntries(workload.inputs.map((spec, i) => [
      spec.name, new ort.Tensor(spec.type, new TYPED_ARRAYS[spec.type](data[i]), spec.dims)]))};
  }
  const held = graphTensors(ort, entry, workload, step, graph, api);
  held.inputBuffers.forEach((buffer, i) => writeInput(ort, buffer, data[i]));
  return {feeds: held.feeds, fetches: held.fetches, readers: held.readers};
};

const createSession = async (ort, workload, step, name) => {
  const model = new Uint8Array(await bytes(workload.model));
  const options = sessionOptions(workload, step.mode, step.faults.includes('ep-name-as-string'));
  const session = await ort.InferenceSession.create(model, options);
  return {session, name, graphs: new Map()};
};

/** What a failed run means: JSEP refuses a buffer it did not record with. */
const runFailure = (step, index, graph, error) => {
  const message = String(error && error.message ? error.message : error);
  const where = step.graphs > 1 ? ` (gpu_graph_id ${graph})` : '';
  const refused = step.mode === 'capture' && /graph capture mode is not supported/i.test(message);
  return {status: refused ? 'capture-unsupported' : 'error', message: `run ${index + 1}${where}: ${message}`};
};

/**
 * The workload's runs on a session (its `schedule`: each run's graph and inputs), every run's
 * outputs read back; what replays (a graph's runs after its first) asked of WebGPU.
 */
const runSession = async (ort, entry, workload, step, api) => {
  const outputs = [];
  const replays = {bindGroups: 0, uniformWrites: 0};
  const recorded = new Set();
  for (const [i, [graph, v]] of workload.schedule.entries()) {
    const {feeds, fetches, readers} =
      await runArguments(ort, entry, workload, step, graph, workload.variants[v], api);
    const before = {...counts};
    api?.startRun();
    let results;
    try {
      results = await (step.graphs > 1
        ? entry.session.run(feeds, fetches || workload.outputs, {extra: {gpu_graph_id: String(graph)}})
        : entry.session.run(feeds, fetches || workload.outputs));
    } catch (error) {
      return runFailure(step, i, graph, error);
    } finally {
      api?.endRun();
    }
    if (recorded.has(graph)) {
      replays.bindGroups += counts.bindGroups - before.bindGroups;
      replays.uniformWrites += counts.uniformWrites - before.uniformWrites;
    }
    recorded.add(graph);
    const run = {};
    for (const name of workload.outputs) {
      const tensor = results[name];
      const data = readers ? await readers[name]() : await tensor.getData();
      run[name] = {type: tensor.type, dims: tensor.dims, data};
    }
    outputs.push(run);
  }
  return {status: 'ok', runs: outputs, replays};
};

/** Creates (or reuses) the step's session and runs it; a failure becomes a status. */
const runStep = async (ort, manifest, step, index, sessions) => {
  const workload = manifest.workloads[step.workload];
  const faults = faultsOn ? step.faults : [];
  const api = faultsOn ? window.__webgpuFaults : undefined;
  const name = `step ${index + 1}`;
  const started = performance.now();
  try {
    if (step.reuse === null) {
      if (step.mode === 'capture') {
        api?.beginRecording(name, faults, Math.max(2, step.graphs));
      }
      try {
        sessions[index] = await createSession(ort, workload, {...step, faults}, name);
      } catch (error) {
        const message = String(error && error.message ? error.message : error);
        return {status: creationStatus(step.mode === 'capture', message), message};
      }
    } else {
      sessions[index] = sessions[step.reuse];
    }
    return await runSession(ort, sessions[index], workload, step, api);
  } catch (error) {
    return {status: 'error', message: String(error && error.message ? error.message : error)};
  } finally {
    api?.endRecording();
    const what = step.reuse === null ? '' : ` (the session of step ${step.reuse + 1} again)`;
    say(`step ${index + 1}/${manifest.steps.length}: ${step.name}${what}: ` +
        `${((performance.now() - started) / 1000).toFixed(2)} s`);
  }
};

const fmt = (value) => (Number.isFinite(value) ? value.toPrecision(3) : String(value));

/** Each output within tolerance of `expected`, or, when not, ten times closer to it than
 * `own` is (the suite's "fits better"): the error, or null. */
const fitsBetter = (outputs, expected, ownError, tolerance) => {
  const other = compareAll(outputs, expected, tolerance);
  return other.ok || other.worst < ownError / 10 ? other.worst : null;
};

/** The suite's detectors on the judged step; every verdict that applies, with its reason. */
const judge = async (manifest, results) => {
  const tolerance = manifest.tolerance;
  const step = manifest.steps[manifest.judge.step];
  const run = results[manifest.judge.step];
  if (run.status !== 'ok') {
    return [[run.status, run.message]];
  }
  const found = [];
  const capture = step.mode === 'capture';
  const workload = manifest.workloads[step.workload];
  const schedule = workload.schedule;
  const several = new Set(schedule.map(([, v]) => v)).size > 1;
  const which = (i) => (several ? ` (run ${i + 1})` : '');
  const cpuOf = async (entry, v) => Object.fromEntries(await Promise.all(
    entry.variants[v].cpu.map(async (spec) => [spec.name, await tensorFile(spec)])));
  const cpu = await Promise.all(workload.variants.map((_, v) => cpuOf(workload, v)));
  const eagerRun = capture ? results[manifest.judge.eager] : run;
  const eagerOk = Boolean(eagerRun && eagerRun.status === 'ok');
  // eager's output for variant v: its first run of those inputs
  const eagerOf = (v) => (eagerOk ? eagerRun.runs[schedule.findIndex(([, w]) => w === v)] : null);
  const expectedOf = (v) => eagerOf(v) || cpu[v];
  const lastV = schedule[schedule.length - 1][1];
  const last = run.runs[run.runs.length - 1];

  const vsCpu = compareAll(last, cpu[lastV], tolerance);
  for (const [name, c] of Object.entries(vsCpu.each)) {
    say(`output '${name}': ${step.mode}${which(run.runs.length - 1)} against onnxruntime CPU: ` +
        `max abs ${fmt(c.maxAbs)}, ${c.mismatched}/${c.total} outside tolerance`);
  }
  if (eagerOk) { // every input's first eager run against onnxruntime CPU
    const bad = workload.variants.map((_, v) => [v, compareAll(eagerOf(v), cpu[v], tolerance)])
      .filter(([, c]) => !c.ok).sort((a, b) => b[1].worst - a[1].worst);
    if (bad.length) {
      const [v, c] = bad[0];
      const at = schedule.findIndex(([, w]) => w === v);
      found.push(['reference-mismatch', `eager${which(at)} differs from onnxruntime CPU: max abs ${fmt(c.worst)}`]);
    }
  }
  if (capture) {
    const against = eagerOk ? 'eager' : 'onnxruntime CPU';
    const each = run.runs.map((outputs, i) => compareAll(outputs, expectedOf(schedule[i][1]), tolerance));
    each.forEach((c, i) => say(`run ${i + 1}${step.graphs > 1 ? ` (graph ${schedule[i][0]})` : ''}: ` +
      `capture against ${against}: max abs ${fmt(c.worst)}${c.ok ? '' : ', outside tolerance'}`));
    const worstRun = each.map((c, i) => [c, i]).filter(([c]) => !c.ok).sort((a, b) => b[0].worst - a[0].worst)[0];
    if (worstRun) {
      const [c, i] = worstRun;
      found.push(['capture-mismatch', `capture differs from ${against}` +
        `${run.runs.length > 1 ? ` in run ${i + 1} of ${run.runs.length}` : ''}: max abs ${fmt(c.worst)}`]);
    }
    // An earlier layout's outputs explain the last run's better than its own: a stale replay.
    const earlier = [...new Set(manifest.steps
      .slice(0, manifest.judge.step)
      .filter((s) => s.mode === 'capture' && s.workload !== step.workload)
      .map((s) => s.workload))];
    if (!vsCpu.ok) {
      const fits = [];
      const [graph, draw] = [workload.variants[lastV].graph, workload.variants[lastV].draw];
      for (const [order, name] of earlier.entries()) {
        const other = manifest.workloads[name];
        const v = other.variants.findIndex((x) => x.graph === graph && x.draw === draw);
        const error = v < 0 ? null : fitsBetter(last, await cpuOf(other, v), vsCpu.worst, tolerance);
        if (error !== null) {
          fits.push([error, order, other.layout]);
        }
      }
      fits.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
      if (fits.length) {
        const [error, , layout] = fits[0];
        found.push(['stale-layout', `capture matches layout '${layout}''s onnxruntime CPU ` +
          `output (max abs ${fmt(error)}) better than its own (max abs ${fmt(vsCpu.worst)})`]);
      }
    }
    // A replay whose output is an earlier run's inputs' output: of the same graph (a stale
    // input), or of another graph (a wrong graph).
    const crossed = (sameGraph) => {
      for (const [i, outputs] of run.runs.entries()) {
        const [graph, v] = schedule[i];
        if (each[i].ok) {
          continue;
        }
        const fits = [];
        for (const [j, [otherGraph, w]] of schedule.slice(0, i).entries()) {
          if (w !== v && (otherGraph === graph) === sameGraph) {
            const error = fitsBetter(outputs, expectedOf(w), each[i].worst, tolerance);
            if (error !== null) {
              fits.push([error, j, otherGraph]);
            }
          }
        }
        fits.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
        if (fits.length) {
          return [i, graph, ...fits[0]];
        }
      }
      return null;
    };
    const wrongGraph = crossed(false);
    if (wrongGraph) {
      const [i, graph, error, j, other] = wrongGraph;
      found.push(['wrong-graph', `run ${i + 1} (graph ${graph}) returned graph ${other}'s result: ` +
        `it matches the output for run ${j + 1}'s inputs (max abs ${fmt(error)}) better than its own`]);
    }
    const staleInput = crossed(true);
    if (staleInput) {
      const [i, graph, error, j] = staleInput;
      found.push(['stale-input', `run ${i + 1}${step.graphs > 1 ? ` (graph ${graph})` : ''} ` +
        `returned the output for run ${j + 1}'s inputs (max abs ${fmt(error)}) rather than for its own`]);
    }
    if (run.runs.length >= 2 && (run.replays.bindGroups || run.replays.uniformWrites)) {
      found.push(['capture-not-engaged', `replays created ${run.replays.bindGroups} bind ` +
        `groups and wrote uniforms ${run.replays.uniformWrites} times`]);
    }
  }
  // Runs of the same inputs agree bit for bit; under capture, replays only.
  const recording = new Set(capture ? schedule.map(([graph]) => graph) : []);
  const first = new Map();
  for (const [i, outputs] of run.runs.entries()) {
    const [graph, v] = schedule[i];
    if (recording.delete(graph)) {
      continue;
    }
    if (!first.has(v)) {
      first.set(v, [i, outputs]);
    } else if (!identical(first.get(v)[1], outputs)) {
      found.push(['nondeterministic', `run ${i + 1} of the same input gave other outputs than run ${first.get(v)[0] + 1}`]);
      break;
    }
  }
  return found;
};

const main = async () => {
  if (typeof GPUDevice === 'undefined' || !navigator.gpu) {
    return {verdicts: ['error'], message: 'this browser offers no WebGPU (navigator.gpu)'};
  }
  installCounters();
  if (faultsOn && FAULT_SCRIPT) {
    window.__webgpuTracer = {bindGroupRewriters: rewriters}; // where faults.js hooks in
    await import(FAULT_SCRIPT);
  }
  const manifest = await (await fetch('repro.json')).json();
  verdictOrder = manifest.verdictOrder;
  const [ort, adapter] = await Promise.all([import(ORT_URL), navigator.gpu.requestAdapter()]);
  ort.env.wasm.numThreads = 1; // threads need cross-origin isolation; WebGPU does the work
  ort.env.logLevel = 'error';
  const info = adapter ? adapter.info : {};
  say(`onnxruntime-web ${ort.env.versions.web} (${ORT_URL}); WebGPU adapter: ` +
      `${info.vendor || '?'} ${info.architecture || '?'} ${info.device || ''}`.trim());
  say(`result ${manifest.result}: ${manifest.case}`);
  if (FAULTS.length) {
    say(`injected fault(s) ${FAULTS.join(', ')}: ${faultsOn ? 'on (?faults=off turns them off)' : 'off'}`);
  }
  const sessions = [];
  const results = [];
  for (const [index, step] of manifest.steps.entries()) {
    results[index] = await runStep(ort, manifest, step, index, sessions);
  }
  const found = await judge(manifest, results);
  const verdicts = found.map(([verdict]) => verdict);
  for (const [verdict, why] of found) {
    say(`${verdict}: ${why}`);
  }
  return {verdicts, message: found.map(([, why]) => why).join('; ')};
};

/** Shows the headline verdict (PASS when none applies), also as `window.reproResult`. */
const finish = ({verdicts, message}) => {
  const verdict = verdictOrder.find((v) => verdicts.includes(v)) || 'pass';
  if (verdict === 'error') {
    say(`error: ${message}`);
  }
  document.title = verdict === 'pass' ? 'PASS' : `FAIL: ${verdict}`;
  say(document.title);
  const faults = faultsOn ? FAULTS : [];
  const unique = [...new Set(verdicts)].sort();
  window.reproResult = {verdict, verdicts: unique, message, faults, lines};
};

const failure = (error) => ({
  verdicts: ['error'],
  message: String(error && error.message ? error.message : error),
});

main().catch(failure).then(finish);
