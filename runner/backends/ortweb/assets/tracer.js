// WebGPU API tracer, injected by Playwright (context.add_init_script) before any page script, so
// it sees every call onnxruntime-web makes. It wraps WebGPU prototype methods, gives GPU objects
// stable ids ("b12" for buffers, "p3" for pipelines), and collects what happens between
// begin(label) and end() into a record: counts, and the dispatches with their bindings when
// asked for. Errors (console.error, uncaught exceptions, uncaptured WebGPU errors, device loss)
// are collected apart (ORT's warnings apart from them) and drained by the harness after each
// case.
//
// Faults: a fault init script, added after this one, changes what ORT binds by pushing a
// function onto `__webgpuTracer.bindGroupRewriters`; each gets (device, descriptor) and returns
// the descriptor to use. The tracer records the bindings actually used.
(() => {
  if (typeof GPUDevice === 'undefined' || window.__webgpuTracer) {
    return;
  }
  const UNIFORM = 0x40; // GPUBufferUsage.UNIFORM

  const known = new WeakMap(); // GPU object -> what the tracer knows of it
  const lostOnes = new WeakSet(); // the `lost` promises resolved
  const serial = {b: 0, p: 0};
  const nextId = (prefix) => `${prefix}${++serial[prefix]}`;

  const tracer = {
    record: null, // the record being collected, or null
    errors: [],
    warnings: [],
    deviceLost: null,
    bindGroupRewriters: [],

    /** Starts a record; buffers created until end() are marked as created for `label`. */
    begin(label, {dispatches = false} = {}) {
      tracer.record = {label, counts: {}, dispatches: dispatches ? [] : null};
    },
    end() {
      const record = tracer.record;
      tracer.record = null;
      return record;
    },
    /** The tracer's id of a buffer (assigning one if the buffer predates the tracer). */
    bufferId(buffer) {
      return bufferInfo(buffer).id;
    },
    /** Whether `device` is lost, destroyed included (which onnxruntime-web does itself). */
    isLost(device) {
      return lostOnes.has(device.lost);
    },
    /** The errors and warnings collected since the last drain. */
    drain() {
      return {errors: tracer.errors.splice(0), warnings: tracer.warnings.splice(0)};
    },
  };

  const bufferInfo = (buffer) => {
    let entry = known.get(buffer);
    if (!entry) {
      entry = {id: nextId('b'), usage: buffer.usage, phase: tracer.record ? tracer.record.label : ''};
      known.set(buffer, entry);
    }
    return entry;
  };
  const count = (name) => {
    if (tracer.record) {
      tracer.record.counts[name] = (tracer.record.counts[name] || 0) + 1;
    }
  };
  /** Replaces proto[name] by `(original, args) => result`, called with the same `this`. */
  const wrap = (proto, name, wrapper) => {
    const original = proto[name];
    if (typeof original === 'function') {
      proto[name] = function (...args) {
        return wrapper.call(this, original, args);
      };
    }
  };

  const USAGES = [
    'MAP_READ', 'MAP_WRITE', 'COPY_SRC', 'COPY_DST', 'INDEX', 'VERTEX', 'UNIFORM', 'STORAGE',
    'INDIRECT', 'QUERY_RESOLVE',
  ];
  /** "COPY_DST|UNIFORM" for 0x48: GPUBufferUsage's bit names, low bit first. */
  const usageName = (usage) => USAGES.filter((_, bit) => usage & (1 << bit)).join('|');

  wrap(GPUDevice.prototype, 'createBuffer', function (original, args) {
    const buffer = original.apply(this, args);
    count('createBuffer');
    count(`createBuffer[${usageName(bufferInfo(buffer).usage)}]`);
    return buffer;
  });

  const pipelineInfo = (pipeline, descriptor) => {
    let entry = known.get(pipeline);
    if (!entry) {
      const id = nextId('p');
      const module = descriptor && descriptor.compute && descriptor.compute.module;
      const label = (descriptor && descriptor.label) || (module && module.label) || '';
      entry = {id, name: label ? `${label}#${id}` : id};
      known.set(pipeline, entry);
    }
    return entry;
  };
  wrap(GPUDevice.prototype, 'createComputePipeline', function (original, args) {
    const pipeline = original.apply(this, args);
    count('createComputePipeline');
    pipelineInfo(pipeline, args[0]);
    return pipeline;
  });
  wrap(GPUDevice.prototype, 'createComputePipelineAsync', function (original, args) {
    count('createComputePipeline');
    return original.apply(this, args).then((pipeline) => {
      pipelineInfo(pipeline, args[0]);
      return pipeline;
    });
  });

  wrap(GPUDevice.prototype, 'createBindGroup', function (original, [descriptor, ...rest]) {
    for (const rewrite of tracer.bindGroupRewriters) {
      descriptor = rewrite(this, descriptor);
    }
    const group = original.call(this, descriptor, ...rest);
    count('createBindGroup');
    const bindings = [];
    for (const entry of descriptor.entries || []) {
      const resource = entry.resource;
      const buffer = resource instanceof GPUBuffer ? resource : resource && resource.buffer;
      if (buffer instanceof GPUBuffer) {
        const {id, usage, phase} = bufferInfo(buffer);
        bindings.push({slot: entry.binding, buffer: id, usage, phase});
      }
    }
    known.set(group, {bindings});
    return group;
  });

  wrap(GPUQueue.prototype, 'writeBuffer', function (original, args) {
    const buffer = args[0];
    count('writeBuffer');
    if (buffer instanceof GPUBuffer && bufferInfo(buffer).usage & UNIFORM) {
      count('uniformWrites');
    }
    return original.apply(this, args);
  });

  // Compute passes: remember the pipeline and bind groups set, snapshot them at each dispatch.
  const passState = (pass) => {
    let state = known.get(pass);
    if (!state) {
      state = {pipeline: null, groups: new Map()};
      known.set(pass, state);
    }
    return state;
  };
  const pass = GPUComputePassEncoder.prototype;
  wrap(pass, 'setPipeline', function (original, args) {
    passState(this).pipeline = args[0];
    return original.apply(this, args);
  });
  wrap(pass, 'setBindGroup', function (original, args) {
    count('setBindGroup');
    passState(this).groups.set(args[0], args[1]);
    return original.apply(this, args);
  });
  const recordDispatch = (encoder, workgroups) => {
    count('dispatchWorkgroups');
    const record = tracer.record;
    if (!record || !record.dispatches) {
      return;
    }
    const state = passState(encoder);
    const bindings = [];
    for (const [, bindGroup] of [...state.groups].sort((a, b) => a[0] - b[0])) {
      const groupInfo = bindGroup && known.get(bindGroup);
      bindings.push(...((groupInfo && groupInfo.bindings) || []));
    }
    const pipeline = state.pipeline ? pipelineInfo(state.pipeline).name : '';
    record.dispatches.push({pipeline, workgroups, bindings});
  };
  wrap(pass, 'dispatchWorkgroups', function (original, args) {
    recordDispatch(this, [args[0], args[1] ?? 1, args[2] ?? 1]);
    return original.apply(this, args);
  });
  wrap(pass, 'dispatchWorkgroupsIndirect', function (original, args) {
    recordDispatch(this, [0, 0, 0]);
    return original.apply(this, args);
  });

  // Errors: uncaptured WebGPU errors and device loss on every device the page asks for (in
  // explore's device pool, devicepool.js, a lease of a pooled device: its own `lost`, and
  // listeners that leave with the lease).
  wrap(GPUAdapter.prototype, 'requestDevice', function (original, args) {
    return original.apply(this, args).then((device) => {
      const {lost} = device;
      lost.then((info) => {
        lostOnes.add(lost);
        if (info.reason !== 'destroyed') {
          tracer.deviceLost = info.message || String(info.reason);
          tracer.errors.push(`WebGPU device lost: ${tracer.deviceLost}`);
        }
      });
      device.addEventListener('uncapturederror', (event) => {
        tracer.errors.push(`WebGPU uncaptured error: ${event.error.message}`);
      });
      return device;
    });
  });
  // ORT's own log lines arrive through console.error at every severity, colored: warnings
  // ("[W:onnxruntime:...", e.g. nodes left to the CPU) are kept apart from errors.
  const consoleError = console.error.bind(console);
  console.error = (...args) => {
    let text = args.map(String).join(' ').replace(/\x1b\[[0-9;]*m/g, '');
    text = text.replace(/^\d{4}-\d\d-\d\d [\d:.]+ /, ''); // ORT's timestamp
    if (/\[[VIW]:onnxruntime/.test(text)) {
      tracer.warnings.push(text);
    } else {
      tracer.errors.push(`console.error: ${text}`);
    }
    consoleError(...args);
  };
  window.addEventListener('error', (event) => {
    tracer.errors.push(`uncaught: ${event.message}`);
  });
  window.addEventListener('unhandledrejection', (event) => {
    tracer.errors.push(`unhandled rejection: ${event.reason}`);
  });

  Object.defineProperty(window, '__webgpuTracer', {value: tracer});
})();
