#!/usr/bin/env python3
"""edgebench's own copy of the TensorFlow peer (from ../shared/peers/tf_train.py; the RESULT line
adds CPU time per image and peak RSS for bench/compare.sh).

Peer baseline: train BVLC AlexNet or GoogLeNet with TensorFlow on the CPU and print the time
per image, so edgebench can be compared with the framework the source studies used, on the same
machine, in the same run.

usage: tf_train.py NET BATCH [STEPS]      NET: alexnet | googlenet
prints two lines per step (the second, `EDGEBENCH step=N loss=L time=T images=B`, for
`edgebench exec --parser edgebench`) and a last line:  RESULT net=.. batch=.. median_s_per_image=..
Needs: pip install tensorflow-cpu (2.21 was used to set the goals).
"""
import os, sys, time, statistics, resource
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf

L = tf.keras.layers

def lrn(x):
    # Caffe LRN(local_size 5, alpha 1e-4, beta 0.75): alpha is divided by local_size in Caffe
    return L.Lambda(lambda t: tf.nn.local_response_normalization(t, 2, 1.0, 1e-4 / 5, 0.75))(x)

def conv(x, n, k, s=1, pad="same", groups=1):
    return L.Conv2D(n, k, s, padding=pad, groups=groups, activation="relu")(x)

def alexnet():
    i = tf.keras.Input((227, 227, 3))
    x = conv(i, 96, 11, 4, "valid"); x = lrn(x); x = L.MaxPool2D(3, 2)(x)
    x = conv(x, 256, 5, groups=2); x = lrn(x); x = L.MaxPool2D(3, 2)(x)
    x = conv(x, 384, 3); x = conv(x, 384, 3, groups=2); x = conv(x, 256, 3, groups=2)
    x = L.MaxPool2D(3, 2)(x); x = L.Flatten()(x)
    x = L.Dense(4096, activation="relu")(x); x = L.Dropout(0.5)(x)
    x = L.Dense(4096, activation="relu")(x); x = L.Dropout(0.5)(x)
    return tf.keras.Model(i, [L.Dense(1000)(x)])

def inception(x, a, br, b, cr, c, p):
    b1 = conv(x, a, 1)
    b2 = conv(conv(x, br, 1), b, 3)
    b3 = conv(conv(x, cr, 1), c, 5)
    b4 = conv(L.MaxPool2D(3, 1, padding="same")(x), p, 1)
    return L.Concatenate()([b1, b2, b3, b4])

def aux(x):
    x = L.AveragePooling2D(5, 3)(x); x = conv(x, 128, 1); x = L.Flatten()(x)
    x = L.Dense(1024, activation="relu")(x); x = L.Dropout(0.7)(x)
    return L.Dense(1000)(x)

def googlenet():
    i = tf.keras.Input((224, 224, 3))
    x = conv(i, 64, 7, 2); x = L.MaxPool2D(3, 2, padding="same")(x); x = lrn(x)
    x = conv(x, 64, 1); x = conv(x, 192, 3); x = lrn(x); x = L.MaxPool2D(3, 2, padding="same")(x)
    x = inception(x, 64, 96, 128, 16, 32, 32); x = inception(x, 128, 128, 192, 32, 96, 64)
    x = L.MaxPool2D(3, 2, padding="same")(x)
    x = inception(x, 192, 96, 208, 16, 48, 64); a1 = aux(x)
    x = inception(x, 160, 112, 224, 24, 64, 64); x = inception(x, 128, 128, 256, 24, 64, 64)
    x = inception(x, 112, 144, 288, 32, 64, 64); a2 = aux(x)
    x = inception(x, 256, 160, 320, 32, 128, 128); x = L.MaxPool2D(3, 2, padding="same")(x)
    x = inception(x, 256, 160, 320, 32, 128, 128); x = inception(x, 384, 192, 384, 48, 128, 128)
    x = L.AveragePooling2D(7, 1)(x); x = L.Flatten()(x); x = L.Dropout(0.4)(x)
    return tf.keras.Model(i, [L.Dense(1000)(x), a1, a2])

def main():
    net, batch = sys.argv[1], int(sys.argv[2])
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 6
    model = alexnet() if net == "alexnet" else googlenet()
    size = 227 if net == "alexnet" else 224
    weights = [1.0] if net == "alexnet" else [1.0, 0.3, 0.3]
    wd = 0.0005 if net == "alexnet" else 0.0002
    opt = tf.keras.optimizers.SGD(0.01, momentum=0.9, weight_decay=wd)
    xent = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    x = tf.random.normal((batch, size, size, 3))
    y = tf.zeros((batch,), tf.int32)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            outs = model(x, training=True)
            outs = outs if isinstance(outs, (list, tuple)) else [outs]
            loss = tf.add_n([w * xent(y, o) for w, o in zip(weights, outs)])
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    times, cpu = [], []
    for i in range(steps):
        t0, c0 = time.perf_counter(), time.process_time()
        loss = float(step())
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        if i > 0:  # first step traces the graph
            times.append(dt)
            cpu.append(dc)
        print(f"step {i} s={dt:.4f} s_per_image={dt / batch:.5f} loss={loss:.4f}")
        # `edgebench exec --parser edgebench` reads this line (one per step).
        print(f"EDGEBENCH step={i} loss={loss:.6g} time={dt:.6f} images={batch}", flush=True)
    print(f"RESULT net={net} batch={batch} params={model.count_params()} "
          f"median_s_per_image={statistics.median(times) / batch:.6f} "
          f"cpu_s_per_image={statistics.median(cpu) / batch:.6f} "
          f"peak_rss_kb={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}")

if __name__ == "__main__":
    main()
