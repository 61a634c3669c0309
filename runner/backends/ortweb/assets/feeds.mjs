// How a page feeds onnxruntime-web's sessions, shared by the suite's page (harness.js) and a
// repro bundle's (repro.mjs), so that a bundle replays a case as the suite ran it: each run's
// inputs as CPU tensors (eager) or written into the GPU buffers a capture graph keeps (or a new
// one every run), pre-allocated outputs, and a decoder's loop: its prefill outside capture
// (gpu_graph_id -1), then decode steps that read the KV caches the device wrote, each present
// cache written in place into its past cache's buffer (or swapped), a rewind zeroing what it drops.

export const TYPED_ARRAYS = {
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
 * The onnxruntime-web build at `url`: an ES module (`*.mjs`), or a UMD script (`*.js`, the only
 * WebGPU bundle before 1.19) loaded by a <script> tag, which defines `globalThis.ort`; given
 * what the pages call and older releases lack.
 */
export const loadModule = async (url) => {
  // onnxruntime-web 1.17 .. 1.22 call GPUAdapter.requestAdapterInfo(), which Chromium has
  // since removed for `adapter.info` ("no available backend found. ERR: [webgpu] TypeError:
  // r.requestAdapterInfo is not a function" on 1.17.3): given back, as a page for them must
  if (typeof GPUAdapter !== 'undefined' && !GPUAdapter.prototype.requestAdapterInfo) {
    GPUAdapter.prototype.requestAdapterInfo = async function requestAdapterInfo() {
      return this.info;
    };
  }
  const ort = await (new URL(url, location.href).pathname.endsWith('.js') // a query may follow
    ? new Promise((resolve, reject) => {
      const script = Object.assign(document.createElement('script'), {src: url});
      script.onload = () => resolve(globalThis.ort);
      script.onerror = () => reject(new Error(`loading the script ${url} failed`));
      document.head.append(script);
    })
    : import(url));
  // before 1.17 a tensor is CPU data only (`data`); before 1.16 a session has no release (it
  // lives until collected)
  ort.Tensor.prototype.getData ||= async function getData() {
    return this.data;
  };
  ort.InferenceSession.prototype.release ||= async () => {};
  return ort;
};

export const byteLength = (tensor) =>
  tensor.dims.reduce((a, b) => a * b, 1) * TYPED_ARRAYS[tensor.type].BYTES_PER_ELEMENT;

/**
 * Releases a session and the GPU buffers made for it, even if ORT throws: destroys the page's,
 * disposes the tensors that hold onnxruntime's.
 */
export const releaseEntry = async (entry) => {
  try {
    await entry.session.release();
  } finally {
    entry.buffers.splice(0).forEach((buffer) => buffer.destroy());
    entry.tensors.splice(0).forEach((tensor) => tensor.dispose());
  }
};

/**
 * The feeding of sessions on onnxruntime-web module `ort`, with faults.js's API `faults` (or
 * none) told of every capture graph's input buffers. A session's `entry` holds its graphs'
 * buffers (`graphs`) and every GPU buffer made for it (`buffers`, destroyed with it; `tensors`,
 * onnxruntime's outputs holding its own buffers, disposed with it). A `spec` says the case: mode,
 * inputs and outputNames, buffers, graphs, sessionName, and where they apply, pre-allocated
 * outputs, inPlace, swapped, deviceCache, prefillInputs and prefillOutputs. `allocatorModel()`: the
 * bytes of context.py's allocator model, whose session allocates buffers for allocator
 * 'onnxruntime'; `release()` releases that session.
 */
export const feeder = (ort, faults, allocatorModel) => {
  let allocator = null; // a session of the allocator model, made at the first buffer it allocates

  /**
   * A GPU buffer on ORT's device for a tensor of `bytes` bytes, kept with the session entry: the
   * page's (`GPUDevice.createBuffer`), or with `spec.buffers.allocator` 'onnxruntime' the output
   * of a run of the allocator model's session, its tensor kept. The C++ builds' replay takes a
   * pre-allocated output for one of onnxruntime's and looks its buffer up by the handle the
   * binding run registered, which that run released again: the page's buffers are found only
   * where the run's own registration lands at the same heap address (what else lives on the heap
   * decides it); onnxruntime's own stay registered (suites/bugs/ort-prealloc-handle.yaml), so
   * the session's first run's buffers stay bound for good (suites/bugs/ort-graph-ids.yaml).
   */
  const gpuBuffer = async (entry, spec, bytes) => {
    const size = Math.ceil(bytes / 16) * 16 || 16;
    if (spec.buffers.allocator !== 'onnxruntime') {
      const buffer = ort.env.webgpu.device.createBuffer({
        size,
        usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
      });
      entry.buffers.push(buffer);
      return buffer;
    }
    allocator ||= await ort.InferenceSession.create(
      await allocatorModel(), {executionProviders: [{name: 'webgpu'}], preferredOutputLocation: 'gpu-buffer'});
    const {y} = await allocator.run({x: new ort.Tensor('float32', new Float32Array(size / 4), [size / 4])});
    entry.tensors.push(y);
    return y.gpuBuffer;
  };

  const release = async () => {
    const session = allocator;
    allocator = null;
    await session?.release();
  };

  const writeInput = (buffer, bytes) => {
    const padded = new Uint8Array(buffer.size);
    padded.set(new Uint8Array(bytes));
    ort.env.webgpu.device.queue.writeBuffer(buffer, 0, padded);
  };

  /** A pre-allocated output's reader: its bytes, copied through a mappable buffer. */
  const reader = (buffer, output) => async () => {
    const device = ort.env.webgpu.device;
    const size = Math.ceil(byteLength(output) / 4) * 4 || 4;
    const staging = device.createBuffer({size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST});
    const encoder = device.createCommandEncoder();
    encoder.copyBufferToBuffer(buffer, 0, staging, 0, size);
    device.queue.submit([encoder.finish()]);
    try {
      await staging.mapAsync(GPUMapMode.READ);
      return new TYPED_ARRAYS[output.type](staging.getMappedRange().slice(0, byteLength(output)));
    } finally {
      staging.destroy(); // unmaps it too
    }
  };

  /** A GPU buffer for each of `tensors` (name, type, dims), made one after another. */
  const buffersFor = async (entry, spec, tensors) => {
    const buffers = [];
    for (const tensor of tensors) {
      buffers.push(await gpuBuffer(entry, spec, byteLength(tensor)));
    }
    return buffers;
  };

  /** GPU tensors over `buffers`, one per input of `inputs` (the case's, by default). */
  const feedsOver = (spec, buffers, inputs = spec.inputs) => Object.fromEntries(inputs.map(
    (input, i) => [input.name, ort.Tensor.fromGpuBuffer(buffers[i], {dataType: input.type, dims: input.dims})]));

  /** Pre-allocated GPU tensors for `outputs` and their readers: [fetches, readers]. */
  const outputsOver = async (entry, spec, outputs) => {
    const fetches = {};
    const readers = {};
    for (const output of outputs) {
      const buffer = await gpuBuffer(entry, spec, byteLength(output));
      readers[output.name] = reader(buffer, output);
      fetches[output.name] = ort.Tensor.fromGpuBuffer(
        buffer, {dataType: output.type, dims: output.dims, download: readers[output.name]});
    }
    return [fetches, readers];
  };

  /**
   * Outputs written in place into an input's buffer among `buffers` (a decoder's present KV
   * caches into its past ones), as onnxruntime-genai binds a static KV cache: [fetches, readers].
   */
  const inPlaceOver = (spec, buffers) => {
    const fetches = {};
    const readers = {};
    for (const [output, inputName] of Object.entries(spec.inPlace || {})) {
      const i = spec.inputs.findIndex((input) => input.name === inputName);
      const input = spec.inputs[i];
      readers[output] = reader(buffers[i], input);
      fetches[output] = ort.Tensor.fromGpuBuffer(
        buffers[i], {dataType: input.type, dims: input.dims, download: readers[output]});
    }
    return [fetches, readers];
  };

  /**
   * The GPU buffers of one graph of a capture session and the tensors over them: its inputs (and
   * pre-allocated outputs), made on its first run and kept, as an application keeps them; with
   * `buffers.inputs` (`.outputs`) `fresh`, made again for every run. With `spec.swapped`, a second
   * buffer for every input an output is written into: the graph's runs alternate between the two
   * sides (`held`, `held.swap`), each writing its outputs into the buffers the other side reads.
   */
  const graphTensors = async (entry, spec, graph) => {
    const known = entry.graphs.get(graph);
    const held = {...known};
    if (!known || spec.buffers.inputs === 'fresh') {
      const buffers = await buffersFor(entry, spec, spec.inputs);
      faults?.inputs(spec.sessionName, graph, buffers, spec.inputs.map((input) => input.name));
      held.inputBuffers = buffers;
      held.feeds = feedsOver(spec, buffers);
      [held.inPlace, held.inPlaceReaders] = inPlaceOver(spec, buffers);
      if (spec.swapped) {
        const written = new Set(Object.values(spec.inPlace));
        const other = [];
        for (const [i, buffer] of buffers.entries()) {
          other.push(written.has(spec.inputs[i].name)
            ? await gpuBuffer(entry, spec, byteLength(spec.inputs[i])) : buffer);
        }
        [held.inPlace, held.inPlaceReaders] = inPlaceOver(spec, other);
        const [inPlace, inPlaceReaders] = inPlaceOver(spec, buffers);
        held.swap = {inputBuffers: other, feeds: feedsOver(spec, other), inPlace, inPlaceReaders};
        held.turn = 0;
      }
    }
    if (spec.outputs && (!known || spec.buffers.outputs === 'fresh')) {
      // The harness reads the buffers itself: getData would turn a kept tensor into a CPU one.
      [held.fetches, held.readers] = await outputsOver(
        entry, spec, spec.outputs.filter((o) => !(spec.inPlace || {})[o.name]));
    }
    entry.graphs.set(graph, held);
    return held;
  };

  /** CPU tensors of `inputs` (name, type, dims) over `bytes`. */
  const cpuFeeds = (inputs, bytes) => Object.fromEntries(inputs.map((input, i) => [
    input.name, new ort.Tensor(input.type, new TYPED_ARRAYS[input.type](bytes[i]), input.dims)]));

  /** Zero positions `length` on (axis 2) of a [batch, heads, positions, width] float32 cache. */
  const zeroFrom = (array, dims, length) => {
    const [batch, heads, positions, width] = dims;
    for (let block = 0; block < batch * heads; block++) {
      array.fill(0, (block * positions + length) * width, (block + 1) * positions * width);
    }
  };

  /** The same, in a GPU buffer holding such a cache. */
  const zeroFromInBuffer = (buffer, dims, length) => {
    const [batch, heads, positions, width] = dims;
    const zeros = new Uint8Array((positions - length) * width * 4);
    for (let block = 0; block < batch * heads; block++) {
      ort.env.webgpu.device.queue.writeBuffer(buffer, (block * positions + length) * width * 4, zeros);
    }
  };

  /**
   * One run's feeds and fetches for graph `graph` and input `bytes`: CPU tensors (eager, dynamic),
   * or the graph's GPU tensors with `bytes` written into their buffers (capture); a null in `bytes`
   * leaves that buffer as it is (a decoder's KV cache), `clearFrom` zeroes the positions of those
   * caches from that length on (a rewind).
   */
  const runArguments = async (entry, spec, graph, bytes, clearFrom) => {
    if (spec.mode !== 'capture') {
      return {feeds: cpuFeeds(spec.inputs, bytes), fetches: spec.outputNames};
    }
    const held = await graphTensors(entry, spec, graph);
    const side = held.swap && held.turn++ % 2 ? held.swap : held; // swapped: every other run
    side.inputBuffers.forEach((buffer, i) => {
      if (bytes[i]) {
        writeInput(buffer, bytes[i]);
      } else if (clearFrom !== undefined) {
        zeroFromInBuffer(buffer, spec.inputs[i].dims, clearFrom);
      }
    });
    if (!spec.inPlace) {
      return {
        feeds: held.feeds,
        fetches: held.fetches || spec.outputNames,
        readers: held.readers,
        inputs: held.inputBuffers,
      };
    }
    // null: onnxruntime allocates that output
    const allocated = Object.fromEntries(spec.outputNames.map((name) => [name, null]));
    return {
      feeds: side.feeds,
      fetches: {...allocated, ...held.fetches, ...side.inPlace},
      readers: {...held.readers, ...side.inPlaceReaders},
      inputs: side.inputBuffers,
    };
  };

  /**
   * A decoder's prefill: the prompt's inputs (`spec.prefillInputs`, CPU tensors) at its own
   * sequence length, uncaptured. Under capture (run option gpu_graph_id -1, as onnxruntime-genai
   * runs its prompt) its KV caches are the graph's GPU buffers that its first decode step reads,
   * zeroed by `bytes` and written in place, so that step starts from the caches the device wrote.
   */
  const prefillArguments = async (entry, spec, graph, bytes) => {
    if (spec.mode !== 'capture') {
      return {feeds: cpuFeeds(spec.prefillInputs, bytes), fetches: spec.outputNames};
    }
    // A capture session takes GPU buffers only, a run outside capture too (measured on 1.30.0):
    // the prompt's own inputs and outputs get buffers of the graph's, made once.
    const held = await graphTensors(entry, spec, graph);
    if (!held.prefill) {
      const buffers = await buffersFor(entry, spec, spec.prefillInputs);
      const outputs = spec.prefillOutputs.filter((o) => !spec.inPlace[o.name]);
      const [fetches, readers] = await outputsOver(entry, spec, outputs);
      held.prefill = {buffers, feeds: feedsOver(spec, buffers, spec.prefillInputs), fetches, readers};
    }
    const reads = held.swap && held.turn % 2 ? held.swap : held; // what the next decode step reads
    const caches = new Set(Object.values(spec.inPlace));
    const feeds = {...held.prefill.feeds};
    spec.prefillInputs.forEach((input, i) => {
      if (caches.has(input.name)) {
        writeInput(reads.inputBuffers[spec.inputs.findIndex((own) => own.name === input.name)], bytes[i]);
        feeds[input.name] = reads.feeds[input.name];
      } else {
        writeInput(held.prefill.buffers[i], bytes[i]);
      }
    });
    // the tensors that write into those buffers in place
    const into = held.swap && reads === held ? held.swap : held;
    return {
      feeds,
      fetches: {...held.prefill.fetches, ...into.inPlace},
      readers: {...held.prefill.readers, ...into.inPlaceReaders},
      inputs: reads.inputBuffers,
      options: {extra: {gpu_graph_id: '-1'}},
    };
  };

  /**
   * What run `bytes` writes under a decoder's KV caches kept on the device (`spec.deviceCache`):
   * a graph's first run writes every input; later ones leave the caches to what the graph's earlier
   * runs wrote: kept in their GPU buffers (capture: null), or fed as the previous run returned them
   * (eager), a rewind's dropped positions zeroed.
   */
  const carriedBytes = (spec, bytes, previous, clearFrom) => {
    const caches = spec.deviceCache.caches; // past -> present
    return bytes.map((data, i) => {
      const input = spec.inputs[i];
      if (!previous || !(input.name in caches)) {
        return data;
      }
      if (spec.mode === 'capture') {
        return null;
      }
      const cache = previous[caches[input.name]].slice();
      if (clearFrom !== undefined) {
        zeroFrom(cache, input.dims, clearFrom);
      }
      return cache.buffer;
    });
  };

  /**
   * Run `run` of a case's schedule ([graph, variant, prefill]) with its inputs' `bytes`: its
   * feeds, fetches, readers, input buffers and run options. Under a decoder's device cache,
   * `previous` is the graph's last run's outputs by name (what an eager run is fed its caches
   * from; capture keeps them in the graph's buffers).
   */
  const scheduledRun = async (entry, spec, [graph, variant, prefill], bytes, previous) => {
    const clearFrom = spec.deviceCache && spec.deviceCache.rewinds[variant];
    const carried = spec.deviceCache ? carriedBytes(spec, bytes, previous, clearFrom) : bytes;
    const args = await (prefill
      ? prefillArguments(entry, spec, graph, carried)
      : runArguments(entry, spec, graph, carried, clearFrom));
    return {...args, options: args.options || (spec.graphs > 1 ? {extra: {gpu_graph_id: String(graph)}} : null)};
  };

  return {runArguments, scheduledRun, release};
};
