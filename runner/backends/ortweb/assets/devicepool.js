// What explore's examples, each on a new onnxruntime-web instance (harness.js `renew`), share in
// one page: injected by Playwright before the tracer (context.add_init_script; explore's backend
// only, BackendOptions.fresh_sequences) and idle until the page enables it (harness.js `load`).
// Each device request of an instance gets one of the page's pooled devices for that descriptor
// that the instance did not get yet, a new one where there is none: a lease of it, with a `lost`
// of its own. A pooled device's `destroy` while an example's steps run (`stepping`: a scenario
// that releases every session makes the C++ builds destroy their device, then dispose what they
// still hold, and ask for a device again, as in a page of its own) ends the lease as a real
// destroy would: its buffers destroyed, its `lost` resolved as Chromium resolves it; the device
// stays in the pool, with what it compiled. What the instance does with the device after that
// (anything but destroying its buffers) would run on a live device: the pool says so
// (`usedAfterDestroy`) and the example is run again (page.py) with real destroys
// (`stepping(true, true)`: the destroyed device leaves the pool). Past an example's steps, when
// nothing it reports can see it (its clean-up, or `renew` releasing the instance's sessions), a
// destroy is a no-op. On a pooled device every shader module, bind group layout, pipeline
// layout and compute pipeline is made once per content, and every wasm module is compiled once
// per URL. What an instance shares is what a pure function of its descriptor makes, so an
// example's verdict does not depend on the examples before it (tests/test_ortweb.py,
// tests/test_scenarios.py), while SwiftShader compiles each program once per pooled device
// instead of once per example (docs/commands.md, "Where an ort-web example's time goes"). The
// tracer, injected after this, still sees (and counts) every call onnxruntime-web makes.
(() => {
  if (typeof GPUDevice === 'undefined' || window.__devicePool) {
    return;
  }
  let enabled = false;
  let stepping = false; // an example's steps are running: a destroy ends the device's lease
  let realDestroys = false; // ... and destroys the device
  const given = new Set(); // the pooled devices the current instance got
  const pool = {
    devices: 0, destroyed: 0, spared: 0, made: 0, reused: 0, wasmCompiled: 0, wasmReused: 0,
    usedAfterDestroy: false, // the current example used a device or buffer it had destroyed
    /** From now on, for this page. */
    enable() {
      enabled = true;
    },
    /** A new instance: each of its device requests gets a pooled device it did not get yet. */
    renewed() {
      given.clear();
    },
    /** Whether an example's steps are running (`on`; `real`: its destroys are real ones). */
    stepping(on, real = false) {
      stepping = on;
      if (on) {
        realDestroys = real;
        pool.usedAfterDestroy = false;
      }
    },
  };
  Object.defineProperty(window, '__devicePool', {value: pool});

  // A pooled device's lease: what one instance got of it, until the instance is renewed
  const leases = new WeakMap(); // device -> its current lease {lost, resolve, ended, buffers}
  const leaseOf = new WeakMap(); // buffer -> the lease it was made in
  const queues = new WeakMap(); // queue -> its device
  const lease = (device) => {
    let resolve;
    const lost = new Promise((settle) => {
      resolve = settle;
    });
    leases.set(device, {lost, resolve, ended: false, buffers: new Set()});
    return device;
  };
  const nativeLost = Object.getOwnPropertyDescriptor(GPUDevice.prototype, 'lost').get;
  // what Chromium resolves a destroyed device's `lost` with, a task after `destroy` (measured)
  const DESTROYED = {reason: 'destroyed', message: 'Device was destroyed.'};

  const devices = new Map(); // descriptor as JSON -> its pooled devices alive, oldest first
  const made = new WeakMap(); // device -> Map(kind + content -> object)
  const contentOf = new WeakMap(); // object made here -> its key
  // an object's key for a descriptor naming it: 'auto' and absent stand for themselves; one this
  // pool did not make has none (its identity is unknown), and neither has what names it
  const UNKNOWN = Symbol('unknown');
  const keyOf = (object) => (object === 'auto' || object === undefined ? String(object) : contentOf.get(object) ?? UNKNOWN);
  const known = (...keys) => (keys.includes(UNKNOWN) ? null : JSON.stringify(keys));

  const requestDevice = GPUAdapter.prototype.requestDevice;
  GPUAdapter.prototype.requestDevice = async function (descriptor) {
    if (!enabled) {
      return requestDevice.call(this, descriptor);
    }
    const key = JSON.stringify(descriptor || {});
    if (!devices.has(key)) {
      devices.set(key, []);
    }
    const alive = devices.get(key);
    let pooled = alive.find((device) => !given.has(device));
    if (!pooled) {
      pooled = requestDevice.call(this, descriptor).then((device) => {
        Object.defineProperty(device, 'lost', {get: () => leases.get(device).lost});
        nativeLost.call(device).then((info) => leases.get(device).resolve(info));
        queues.set(device.queue, device);
        const destroy = device.destroy;
        device.destroy = function () {
          const current = leases.get(device);
          if (!stepping || current.ended) {
            return;
          }
          if (realDestroys) {
            const at = alive.indexOf(pooled);
            if (at >= 0) {
              alive.splice(at, 1);
              pool.destroyed++;
            }
            destroy.call(this);
            return;
          }
          current.ended = true;
          pool.spared++;
          current.buffers.forEach((buffer) => buffer.destroy());
          setTimeout(() => current.resolve(DESTROYED));
        };
        made.set(device, new Map());
        pool.devices++;
        return device;
      });
      alive.push(pooled);
    }
    given.add(pooled);
    return pooled.then(lease);
  };

  /** `GPUDevice.prototype[method]` answering from what the device made for the same content. */
  const byContent = (method, kind, content) => {
    const original = GPUDevice.prototype[method];
    GPUDevice.prototype[method] = function (descriptor) {
      const memo = made.get(this);
      const text = memo && content(descriptor);
      if (!text) {
        return original.call(this, descriptor);
      }
      const key = `${kind}:${text}`;
      const async = method.endsWith('Async');
      if (memo.has(key)) {
        pool.reused++;
        return async ? Promise.resolve(memo.get(key)) : memo.get(key);
      }
      pool.made++;
      const keep = (object) => {
        memo.set(key, object);
        contentOf.set(object, key);
        return object;
      };
      return async ? original.call(this, descriptor).then(keep) : keep(original.call(this, descriptor));
    };
  };
  // labels too: the tracer names a dispatch's pipeline by its label
  byContent('createShaderModule', 'module', (d) => known(d.label ?? null, d.code));
  byContent('createBindGroupLayout', 'group-layout', (d) => known(d.label ?? null, d.entries));
  byContent('createPipelineLayout', 'layout', (d) => known(d.label ?? null, ...d.bindGroupLayouts.map(keyOf)));
  const pipeline = (d) => known(d.label ?? null, keyOf(d.layout), keyOf(d.compute.module),
    d.compute.entryPoint ?? null, d.compute.constants ?? null);
  byContent('createComputePipeline', 'pipeline', pipeline);
  byContent('createComputePipelineAsync', 'pipeline', pipeline);

  // A lease's buffers, and what an instance does with a device or buffer whose lease it ended
  const createBuffer = GPUDevice.prototype.createBuffer;
  GPUDevice.prototype.createBuffer = function (descriptor) {
    const buffer = createBuffer.call(this, descriptor);
    const current = leases.get(this);
    if (current) {
      current.buffers.add(buffer);
      leaseOf.set(buffer, current);
    }
    return buffer;
  };
  const watch = (prototype, leaseOfThis, except) => {
    for (const name of Object.getOwnPropertyNames(prototype)) {
      const original = Object.getOwnPropertyDescriptor(prototype, name).value;
      if (name === 'constructor' || except.includes(name) || typeof original !== 'function') {
        continue;
      }
      prototype[name] = function (...args) {
        if (stepping && leaseOfThis(this)?.ended) {
          pool.usedAfterDestroy = true;
        }
        return original.apply(this, args);
      };
    }
  };
  // a buffer's destroy is what a real destroy leaves harmless; a device's is its own (above)
  watch(GPUDevice.prototype, (device) => leases.get(device), []);
  watch(GPUQueue.prototype, (queue) => leases.get(queues.get(queue)), []);
  watch(GPUBuffer.prototype, (buffer) => leaseOf.get(buffer), ['destroy']);

  // onnxruntime-web instantiates its wasm with instantiateStreaming(fetch(url)): compiled once
  const compiled = new Map(); // url -> Promise<WebAssembly.Module>
  const instantiateStreaming = WebAssembly.instantiateStreaming;
  WebAssembly.instantiateStreaming = async function (source, imports) {
    const response = await source;
    if (!enabled || !response.url) {
      return instantiateStreaming.call(WebAssembly, response, imports);
    }
    if (compiled.has(response.url)) {
      pool.wasmReused++;
      response.body?.cancel(); // unread, its 20 MB would stay in flight until collected
    } else {
      pool.wasmCompiled++;
      compiled.set(response.url, WebAssembly.compileStreaming(response));
    }
    const module = await compiled.get(response.url);
    return {module, instance: await WebAssembly.instantiate(module, imports)};
  };
})();
