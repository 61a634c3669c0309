// What explore's examples, each on a new onnxruntime-web instance (harness.js `renew`), share in
// one page: injected by Playwright before the tracer (context.add_init_script; explore's backend
// only, BackendOptions.fresh_sequences) and idle until the page enables it (harness.js `load`).
// Each device request of an instance gets a lease of one of the page's pooled devices for that
// descriptor that no live lease of the instance holds (a new device where there is none): a device
// object of its own, with its own `lost`. A `destroy` while an example's steps run (`stepping`: a
// scenario that releases every session makes the C++ builds destroy their device, then dispose
// what they still hold, and ask for a device again, as in a page of its own) ends the lease as a
// real destroy would: its buffers destroyed, its listeners and error scopes gone, its `lost`
// resolved as Chromium resolves it; the device stays in the pool with what it compiled, and the
// instance's next request gets a new lease of it. What the instance does after that through the
// ended lease (but destroying its buffers), or with an object the new lease did not get itself,
// would meet a destroyed device in a page of its own: the pool says so (`usedAfterDestroy`) and
// the example is run again (page.py) with real destroys (`stepping(true, true)`: the destroyed
// device leaves the pool). Past an example's steps, when nothing it reports can see it (its
// clean-up, or `renew` releasing the instance's sessions), a destroy is a no-op; `renew` then
// retires the instance's leases (their buffers, listeners and error scopes go, as with a
// destroy), dead instances' included. On a pooled device every shader module, bind
// group layout, pipeline layout and compute pipeline is made once per content, and every wasm
// module is compiled once per URL. What an instance shares is what a pure function of its
// descriptor makes, so an example's verdict does not depend on the examples before it
// (tests/test_ortweb.py, tests/test_scenarios.py), while SwiftShader compiles each program once
// per page instead of once per example (docs/throughput.md, "Where an ort-web example's time
// goes"). The tracer, injected after this, still sees (and counts) every call onnxruntime-web
// makes.
(() => {
  if (typeof GPUDevice === 'undefined' || window.__devicePool) {
    return;
  }
  let enabled = false;
  let stepping = false; // an example's steps are running: a destroy ends the device's lease
  let realDestroys = false; // ... and destroys the device
  // descriptor as JSON -> its pooled devices alive, oldest first: {device (a promise), lease (the
  // current instance's live lease of it, or null)}
  const alive = new Map();
  const pool = {
    devices: 0, destroyed: 0, spared: 0, made: 0, reused: 0, wasmCompiled: 0, wasmReused: 0,
    usedAfterDestroy: false, // the current example used what a destroy of its had ended
    /** From now on, for this page. */
    enable() {
      enabled = true;
    },
    /** A new instance: no device is leased to it yet (the earlier instance's leases retire). */
    renewed() {
      for (const record of [...alive.values()].flat()) {
        if (record.lease) {
          retire(record.lease);
          record.lease = null;
        }
      }
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

  // A lease: one instance's use of a pooled device, through a device object of its own (a Proxy:
  // its `lost`, `destroy`, `queue`, listeners, error scopes and expandos are the lease's, every
  // call goes to the device). What the lease made or got from the device is its own; a call that
  // passes a pooled object the lease did not get (another lease's, e.g. from a program cache that
  // outlived its device's destroy) or that comes through an ended lease would fail or do nothing
  // on a destroyed device in a page of its own: the pool says so (`usedAfterDestroy`).
  // every object made or got through a lease -> the lease that last made or got it (an instance
  // has one live lease of a device at a time, and the device's made-once objects are its own)
  const ownerOf = new WeakMap();
  const foreign = (lease, value, depth) => {
    if (value === null || typeof value !== 'object' || ArrayBuffer.isView(value) || value instanceof ArrayBuffer) {
      return false;
    }
    if (ownerOf.has(value)) {
      return ownerOf.get(value) !== lease;
    }
    const plain = Array.isArray(value) || Object.getPrototypeOf(value) === Object.prototype;
    return plain && depth < 3 && Object.values(value).some((item) => foreign(lease, item, depth + 1));
  };
  const adopt = (lease, object) => {
    if (object !== null && typeof object === 'object') {
      ownerOf.set(object, lease);
      if (object instanceof GPUBuffer) {
        lease.buffers.add(object);
      }
    }
    return object;
  };
  /** `original` called on `target` for `lease`: watched, and what it makes or gets the lease's. */
  const call = (lease, target, original, args) => {
    if (stepping && !realDestroys && (lease.ended || args.some((arg) => foreign(lease, arg, 0)))) {
      pool.usedAfterDestroy = true;
    }
    const result = original.apply(target, args);
    if (result instanceof Promise) {
      result.then((object) => adopt(lease, object), () => {});
      return result;
    }
    return adopt(lease, result);
  };
  /** A settable accessor of `target`'s (`label`, `onuncapturederror`): set on the device. */
  const settable = (target, name) => {
    for (let proto = target; proto; proto = Object.getPrototypeOf(proto)) {
      const descriptor = Object.getOwnPropertyDescriptor(proto, name);
      if (descriptor) {
        return Boolean(descriptor.set);
      }
    }
    return false;
  };
  /** `target` (a device or its queue) as `lease` sees it; `own(name)` answers first. */
  const leased = (lease, target, own) => {
    const expandos = new Map();
    const methods = new Map();
    return new Proxy(target, {
      get(_, name) {
        if (expandos.has(name)) {
          return expandos.get(name);
        }
        const answer = own(name);
        if (answer !== undefined) {
          return answer;
        }
        const value = target[name];
        if (typeof value !== 'function') {
          return value;
        }
        if (!methods.has(name)) {
          methods.set(name, (...args) => call(lease, target, value, args));
        }
        return methods.get(name);
      },
      set(_, name, value) {
        if (settable(target, name)) {
          target[name] = value;
          if (name === 'onuncapturederror') {
            lease.handler = value;
          }
        } else {
          expandos.set(name, value);
        }
        return true;
      },
    });
  };
  const nativeLost = Object.getOwnPropertyDescriptor(GPUDevice.prototype, 'lost').get;
  // what Chromium resolves a destroyed device's `lost` with, a task after `destroy` (measured)
  const DESTROYED = {reason: 'destroyed', message: 'Device was destroyed.'};

  /**
   * What a lease left on the device goes with it, as it would with a destroyed device: its
   * buffers, listeners and error scopes. A later lease sees none of it (nor does a lease whose
   * instance trapped, half-way through a run).
   */
  const retire = (lease) => {
    const {device} = lease;
    if (!device) {
      return; // not here yet: nothing set up
    }
    lease.buffers.forEach((buffer) => buffer.destroy());
    for (const args of lease.listeners) {
      device.removeEventListener(...args);
    }
    if (lease.handler && device.onuncapturederror === lease.handler) {
      device.onuncapturederror = null;
    }
    for (; lease.scopes > 0; lease.scopes--) {
      device.popErrorScope().catch(() => {});
    }
  };
  /** A new lease of `record`'s device for the current instance: its device object, once here. */
  const lease = async (record) => {
    let resolve;
    const lost = new Promise((settle) => {
      resolve = settle;
    });
    const current = {
      device: null, lost, resolve, ended: false, buffers: new Set(), listeners: [], handler: null,
      scopes: 0,
    };
    record.lease = current;
    const device = (current.device = await record.device);
    let queue = null;
    const destroy = () => {
      if (!stepping || record.lease !== current) {
        return;
      }
      if (realDestroys) {
        record.leave();
        pool.destroyed++;
        device.destroy();
        return;
      }
      current.ended = true;
      record.lease = null; // the instance's next request may have the device again
      pool.spared++;
      retire(current);
      setTimeout(() => current.resolve(DESTROYED));
    };
    const addEventListener = (...args) => {
      current.listeners.push(args);
      return call(current, device, device.addEventListener, args);
    };
    const removeEventListener = (...args) => {
      current.listeners = current.listeners.filter((kept) => kept[0] !== args[0] || kept[1] !== args[1]);
      return call(current, device, device.removeEventListener, args);
    };
    const scoped = (change, method) => (...args) => {
      current.scopes += change;
      return call(current, device, method, args);
    };
    const pushErrorScope = scoped(1, device.pushErrorScope);
    const popErrorScope = scoped(-1, device.popErrorScope);
    const own = {
      lost: () => lost,
      pushErrorScope: () => pushErrorScope,
      popErrorScope: () => popErrorScope,
      destroy: () => destroy,
      queue: () => (queue ??= leased(current, device.queue, () => undefined)),
      addEventListener: () => addEventListener,
      removeEventListener: () => removeEventListener,
    };
    return leased(current, device, (name) => own[name]?.());
  };

  const made = new WeakMap(); // device -> Map(kind + content -> object)
  const contentOf = new WeakMap(); // object made here -> its key
  // an object's key for a descriptor naming it: 'auto' and absent stand for themselves; one this
  // pool did not make has none (its identity is unknown), and neither has what names it
  const UNKNOWN = Symbol('unknown');
  const keyOf = (object) => (object === 'auto' || object === undefined ? String(object) : contentOf.get(object) ?? UNKNOWN);
  const known = (...keys) => (keys.includes(UNKNOWN) ? null : JSON.stringify(keys));

  const requestDevice = GPUAdapter.prototype.requestDevice;
  GPUAdapter.prototype.requestDevice = function (descriptor) {
    if (!enabled) {
      return requestDevice.call(this, descriptor);
    }
    const key = JSON.stringify(descriptor || {});
    if (!alive.has(key)) {
      alive.set(key, []);
    }
    const records = alive.get(key);
    let record = records.find((kept) => !kept.lease);
    if (!record) {
      const leave = () => records.includes(record) && records.splice(records.indexOf(record), 1);
      const device = requestDevice.call(this, descriptor).then((device) => {
        made.set(device, new Map());
        nativeLost.call(device).then((info) => {
          leave();
          record.lease?.resolve(info);
        });
        pool.devices++;
        return device;
      });
      record = {device, lease: null, leave};
      records.push(record);
    }
    return lease(record);
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

  // Buffers, encoders and passes a lease made: called through their prototypes, watched as the
  // lease's device is, but a buffer's destroy (harmless on a destroyed device), which only takes
  // the buffer off its lease's
  const destroyBuffer = GPUBuffer.prototype.destroy;
  GPUBuffer.prototype.destroy = function () {
    ownerOf.get(this)?.buffers.delete(this);
    return destroyBuffer.call(this);
  };
  for (const [prototype, except] of [
    [GPUBuffer.prototype, ['destroy']], [GPUCommandEncoder.prototype, []],
    [GPUComputePassEncoder.prototype, []],
  ]) {
    for (const name of Object.getOwnPropertyNames(prototype)) {
      const original = Object.getOwnPropertyDescriptor(prototype, name).value;
      if (name === 'constructor' || except.includes(name) || typeof original !== 'function') {
        continue;
      }
      prototype[name] = function (...args) {
        const owner = ownerOf.get(this);
        return owner ? call(owner, this, original, args) : original.apply(this, args);
      };
    }
  }

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
