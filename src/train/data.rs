//! Training data: a seeded synthetic set (the default) or an image folder. Images are produced
//! per batch, so a 1024-image sweep never holds the whole set in a 4 GB board's memory.

use rayon::prelude::*;
use std::path::{Path, PathBuf};

/// Per-channel mean subtracted from every pixel (RGB order): the ImageNet mean of the BVLC
/// models (Caffe's BGR 104, 117, 123).
pub(crate) const MEAN_RGB: [f32; 3] = [123.0, 117.0, 104.0];
/// Images are resized to this square before the centre crop, as Caffe's convert_imageset did.
pub(crate) const RESIZE_TO: u32 = 256;

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("cannot read image {path}: {reason}. Replace or remove the file, or point --dataset at another folder")]
    BadImage { path: PathBuf, reason: String },
    #[error("dataset folder {dir} holds {found} images but the sweep asks for {wanted}; lower --images or add images")]
    TooFew {
        dir: PathBuf,
        found: usize,
        wanted: usize,
    },
    #[error("cannot read dataset folder {dir}: {reason}. --dataset wants a folder with one subfolder of JPEG/PNG images per class")]
    BadFolder { dir: PathBuf, reason: String },
}

/// Where the images come from.
pub enum Dataset {
    /// Deterministic noise images: image `i` is the same in every run with the same seed.
    Synthetic {
        seed: u64,
        classes: usize,
        images: usize,
    },
    /// An image folder: one subfolder per class (sorted by name = class index), or images
    /// directly in the folder for a single class, like the studies' 1024 tench images.
    Folder {
        dir: PathBuf,
        files: Vec<(PathBuf, u32)>,
    },
}

/// One batch in NCHW order, mean subtracted, and its labels.
pub struct Batch {
    pub images: Vec<f32>,
    pub labels: Vec<u32>,
}

fn is_image(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .map(|e| matches!(e.to_ascii_lowercase().as_str(), "jpg" | "jpeg" | "png"))
        .unwrap_or(false)
}

fn sorted_entries(dir: &Path) -> Result<Vec<PathBuf>, DataError> {
    let bad = |e: std::io::Error| DataError::BadFolder {
        dir: dir.to_path_buf(),
        reason: e.to_string(),
    };
    let mut entries = std::fs::read_dir(dir)
        .map_err(bad)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(bad)?;
    entries.sort();
    Ok(entries)
}

impl Dataset {
    pub fn synthetic(seed: u64, classes: usize, images: usize) -> Dataset {
        Dataset::Synthetic {
            seed,
            classes: classes.max(1),
            images,
        }
    }

    /// Lists the folder and checks, cheaply (headers only), that the first `wanted` images can
    /// be decoded, so a bad file is named before any training starts.
    pub fn folder(dir: &Path, wanted: usize) -> Result<Dataset, DataError> {
        let mut files = Vec::new();
        let entries = sorted_entries(dir)?;
        let classes: Vec<&PathBuf> = entries.iter().filter(|p| p.is_dir()).collect();
        for (class, sub) in classes.iter().enumerate() {
            for path in sorted_entries(sub)?.into_iter().filter(|p| is_image(p)) {
                files.push((path, class as u32));
            }
        }
        if classes.is_empty() {
            files.extend(entries.into_iter().filter(|p| is_image(p)).map(|p| (p, 0)));
        }
        if files.len() < wanted {
            return Err(DataError::TooFew {
                dir: dir.to_path_buf(),
                found: files.len(),
                wanted,
            });
        }
        files.truncate(wanted);
        files.par_iter().try_for_each(|(path, _)| {
            image::ImageReader::open(path)
                .and_then(|r| r.with_guessed_format())
                .map_err(|e| e.to_string())
                .and_then(|r| r.into_dimensions().map_err(|e| e.to_string()))
                .map(|_| ())
                .map_err(|reason| DataError::BadImage {
                    path: path.clone(),
                    reason,
                })
        })?;
        Ok(Dataset::Folder {
            dir: dir.to_path_buf(),
            files,
        })
    }

    pub fn len(&self) -> usize {
        match self {
            Dataset::Synthetic { images, .. } => *images,
            Dataset::Folder { files, .. } => files.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What identifies the data in the resume key: same identity, same images.
    pub(crate) fn identity(&self) -> String {
        match self {
            Dataset::Synthetic { seed, classes, .. } => {
                format!("synthetic:seed={seed}:classes={classes}")
            }
            Dataset::Folder { dir, .. } => {
                let dir = dir.canonicalize().unwrap_or_else(|_| dir.clone());
                format!("folder:{}", dir.display())
            }
        }
    }

    /// Loads images `first .. first + batch` (wrapping around the set, as Caffe's data layer
    /// does) at `shape` = (channels, height, width).
    pub fn batch(&self, first: usize, batch: usize, shape: [usize; 3]) -> Result<Batch, DataError> {
        let per_image: usize = shape.iter().product();
        let mut images = vec![0f32; per_image * batch];
        let labels = images
            .par_chunks_mut(per_image)
            .enumerate()
            .map(|(j, out)| self.load((first + j) % self.len(), shape, out))
            .collect::<Result<Vec<u32>, DataError>>()?;
        Ok(Batch { images, labels })
    }

    fn load(&self, index: usize, shape: [usize; 3], out: &mut [f32]) -> Result<u32, DataError> {
        match self {
            Dataset::Synthetic { seed, classes, .. } => {
                synthetic_image(*seed, index, out);
                Ok((index % classes) as u32)
            }
            Dataset::Folder { files, .. } => {
                let (path, label) = &files[index];
                decode_into(path, shape, out)?;
                Ok(*label)
            }
        }
    }
}

/// SplitMix64: tiny, fast and fully specified, so the synthetic set is documented by its code.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Synthetic image `index`: pixels uniform in 0..=255 from SplitMix64 seeded with
/// `seed ^ index * golden`, minus 127.5 — the value range of a mean-subtracted photo.
pub(crate) fn synthetic_image(seed: u64, index: usize, out: &mut [f32]) {
    let mut state = seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for chunk in out.chunks_mut(8) {
        let bits = splitmix64(&mut state);
        for (k, v) in chunk.iter_mut().enumerate() {
            *v = ((bits >> (8 * k)) & 0xFF) as f32 - 127.5;
        }
    }
}

/// Decodes, resizes to 256x256, centre-crops to (h, w) and writes CHW minus the mean.
fn decode_into(path: &Path, shape: [usize; 3], out: &mut [f32]) -> Result<(), DataError> {
    let bad = |reason: String| DataError::BadImage {
        path: path.to_path_buf(),
        reason,
    };
    let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let reader = image::ImageReader::new(std::io::Cursor::new(&bytes))
        .with_guessed_format()
        .map_err(|e| bad(e.to_string()))?;
    // The JPEG decoder fills a cut-off scan with grey instead of failing: check the file
    // reaches its end-of-image marker first.
    if reader.format() == Some(image::ImageFormat::Jpeg) {
        jpeg_complete(&bytes).map_err(bad)?;
    }
    let img = reader.decode().map_err(|e| bad(e.to_string()))?.to_rgb8();
    let [c, h, w] = shape;
    let size = RESIZE_TO.max(h as u32).max(w as u32);
    let img = image::imageops::resize(&img, size, size, image::imageops::FilterType::Triangle);
    let (top, left) = ((size as usize - h) / 2, (size as usize - w) / 2);
    for ch in 0..c.min(3) {
        for y in 0..h {
            for x in 0..w {
                let px = img.get_pixel((left + x) as u32, (top + y) as u32);
                out[(ch * h + y) * w + x] = px[ch] as f32 - MEAN_RGB[ch];
            }
        }
    }
    Ok(())
}

/// Checks that a JPEG's segments and entropy-coded scans run through to the end-of-image
/// marker (FF D9). Walks the segment lengths from the start, so an EOI inside an embedded
/// thumbnail (in APP1) does not count; a file cut anywhere before its EOI fails.
pub(crate) fn jpeg_complete(data: &[u8]) -> Result<(), String> {
    let cut = |at: usize| {
        Err(format!(
            "truncated JPEG: {} bytes, no end-of-image marker (the data stops at byte {at}); \
             the file was cut off while being written or copied",
            data.len()
        ))
    };
    if data.get(..2) != Some(&[0xFF, 0xD8]) {
        return Err("not a JPEG: no start-of-image marker".into());
    }
    let mut i = 2;
    loop {
        // A marker: FF, any FF fill bytes, then the code.
        if data.get(i) != Some(&0xFF) {
            return match data.get(i) {
                None => cut(i),
                Some(b) => Err(format!(
                    "corrupt JPEG: byte {b:#04x} at offset {i} where a marker should start"
                )),
            };
        }
        while data.get(i) == Some(&0xFF) {
            i += 1;
        }
        let Some(&code) = data.get(i) else {
            return cut(i);
        };
        i += 1;
        match code {
            0xD9 => return Ok(()),
            // Standalone markers: no length.
            0x01 | 0xD0..=0xD7 => continue,
            _ => {}
        }
        let Some(len) = data
            .get(i..i + 2)
            .map(|l| u16::from_be_bytes([l[0], l[1]]) as usize)
        else {
            return cut(i);
        };
        if len < 2 {
            return Err(format!("corrupt JPEG: segment length {len} at offset {i}"));
        }
        i += len;
        if i > data.len() {
            return cut(data.len());
        }
        if code == 0xDA {
            // Entropy-coded data runs to the next marker that is not a stuffed FF 00 or a
            // restart marker.
            loop {
                match (data.get(i), data.get(i + 1)) {
                    (Some(0xFF), Some(0x00 | 0xD0..=0xD7)) => i += 2,
                    (Some(0xFF), Some(0xFF)) => i += 1,
                    (Some(0xFF), Some(_)) => break,
                    (Some(_), _) => i += 1,
                    (None, _) => return cut(i),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_set_is_deterministic_and_varied() {
        let ds = Dataset::synthetic(7, 1, 4);
        let a = ds.batch(0, 2, [3, 8, 8]).unwrap();
        let b = ds.batch(0, 2, [3, 8, 8]).unwrap();
        assert_eq!(a.images, b.images);
        assert_ne!(a.images[..192], a.images[192..]);
        // wraps around: image 4 is image 0
        let c = ds.batch(3, 2, [3, 8, 8]).unwrap();
        assert_eq!(c.images[192..], a.images[..192]);
        let mean: f32 = a.images.iter().sum::<f32>() / a.images.len() as f32;
        assert!(mean.abs() < 15.0, "mean {mean}");
        assert!(a.images.iter().all(|v| (-127.5..=127.5).contains(v)));
        assert_ne!(
            Dataset::synthetic(8, 1, 4)
                .batch(0, 1, [3, 8, 8])
                .unwrap()
                .images,
            a.images[..192]
        );
    }

    #[test]
    fn folder_reads_classes_and_names_a_corrupt_file() {
        let dir = tempfile::tempdir().unwrap();
        for (class, n) in [("a_tench", 2), ("b_goldfish", 1)] {
            std::fs::create_dir(dir.path().join(class)).unwrap();
            for i in 0..n {
                let img = image::RgbImage::from_fn(300, 280, |x, y| {
                    image::Rgb([(x % 256) as u8, (y % 256) as u8, 9])
                });
                img.save(dir.path().join(class).join(format!("{i}.png")))
                    .unwrap();
            }
        }
        let ds = Dataset::folder(dir.path(), 3).unwrap();
        let batch = ds.batch(0, 3, [3, 227, 227]).unwrap();
        assert_eq!(batch.labels, vec![0, 0, 1]);
        // centre crop of a 256x256 resize: blue channel is constant 9 - mean
        assert!((batch.images[2 * 227 * 227 + 5] - (9.0 - MEAN_RGB[2])).abs() < 1.0);
        let too_many = Dataset::folder(dir.path(), 10).err().unwrap().to_string();
        assert!(
            too_many.contains("holds 3 images") && too_many.contains("10"),
            "{too_many}"
        );

        std::fs::write(
            dir.path().join("b_goldfish").join("1.jpg"),
            b"not a jpeg at all",
        )
        .unwrap();
        let err = Dataset::folder(dir.path(), 4).err().unwrap().to_string();
        assert!(err.contains("1.jpg"), "{err}");
    }

    fn jpeg_bytes() -> Vec<u8> {
        // Noisy pixels: the scan dwarfs the headers, so a third of the file keeps them whole.
        let img = image::RgbImage::from_fn(320, 240, |x, y| {
            let h = (x.wrapping_mul(2_654_435_761) ^ y.wrapping_mul(40_503)).to_le_bytes();
            image::Rgb([h[0], h[1], h[2]])
        });
        let mut out = std::io::Cursor::new(Vec::new());
        img.write_to(&mut out, image::ImageFormat::Jpeg).unwrap();
        out.into_inner()
    }

    #[test]
    fn a_jpeg_cut_short_is_refused_naming_the_file() {
        let whole = jpeg_bytes();
        assert_eq!(jpeg_complete(&whole), Ok(()));
        for keep in [whole.len() / 3, whole.len() - 2, whole.len() - 1, 3] {
            let err = jpeg_complete(&whole[..keep]).unwrap_err();
            assert!(err.contains("truncated"), "{keep}: {err}");
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cut.jpg");
        std::fs::write(&path, &whole[..whole.len() / 3]).unwrap();
        // The header is intact, so the folder opens; the decode fails, naming the file.
        let ds = Dataset::folder(dir.path(), 1).unwrap();
        let err = ds.batch(0, 1, [3, 64, 64]).err().unwrap().to_string();
        assert!(
            err.contains("cut.jpg") && err.contains("truncated"),
            "{err}"
        );
        std::fs::write(&path, &whole).unwrap();
        assert!(ds.batch(0, 1, [3, 64, 64]).is_ok());
    }
}
