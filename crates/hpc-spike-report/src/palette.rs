//! Colours that stay distinct for the common forms of colour blindness: the
//! palette of Okabe and Ito (2008), as recommended by e.g. Wong, Nature Methods 8,
//! 441 (2011).

use crate::Rgb;

/// Okabe–Ito blue: excitatory populations.
pub const EXCITATORY: Rgb = Rgb(0x00, 0x72, 0xB2);
/// Okabe–Ito vermillion: inhibitory populations.
pub const INHIBITORY: Rgb = Rgb(0xD5, 0x5E, 0x00);

/// The eight Okabe–Ito colours, most distinct first (yellow, weak on white, and
/// black, the text colour, last).
pub const OKABE_ITO: [Rgb; 8] = [
    Rgb(0x00, 0x72, 0xB2), // blue
    Rgb(0xD5, 0x5E, 0x00), // vermillion
    Rgb(0x00, 0x9E, 0x73), // bluish green
    Rgb(0xCC, 0x79, 0xA7), // reddish purple
    Rgb(0x56, 0xB4, 0xE9), // sky blue
    Rgb(0xE6, 0x9F, 0x00), // orange
    Rgb(0xF0, 0xE4, 0x42), // yellow
    Rgb(0x00, 0x00, 0x00), // black
];

/// The `i`-th colour of [`OKABE_ITO`], cycling.
pub fn categorical(i: usize) -> Rgb {
    OKABE_ITO[i % OKABE_ITO.len()]
}
